// ScannedResponse: a JSON success as the fetch transport hands it over
// (docs/clients.md, "The transport"), read by every reader a Response has
// (a real fetch response from an HTTP server on 127.0.0.1): each gives
// what the response itself gives, and the scanner sees the body's counts
// once, whichever reads it.

import assert from "node:assert/strict";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import { ScannedResponse, UsageScanner } from "@policyd/client";

const body = `{"id":"chatcmpl-1","choices":[],"usage":{"prompt_tokens":1234,"completion_tokens":5,"total_tokens":1239}}`;
const server = createServer((_req, res) => {
  res.writeHead(200, { "content-type": "application/json; charset=utf-8", "x-request-id": "req-1" });
  // Two writes: the body reaches the client in more than one piece when it can.
  res.write(body.slice(0, 50));
  setTimeout(() => res.end(body.slice(50)), 5);
});
let url = "";
before(async () => {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/chat/completions`;
});
after(() => server.close());

/** A fetched response, wrapped; seen holds what its scanner reported (input counts, output counts). */
async function scanned(): Promise<{ res: Response; seen: { input: number[]; output: number[] } }> {
  const seen = { input: [] as number[], output: [] as number[] };
  const scan = new UsageScanner((n) => seen.input.push(n));
  return { res: new ScannedResponse(await fetch(url), scan, (n) => seen.output.push(n)), seen };
}

type WithBytes = Response & { bytes(): Promise<Uint8Array> };

/** Each way a caller reads a body, to the text it read (or the error it got). */
const readers: { name: string; read: (r: Response) => Promise<string> }[] = [
  { name: "text", read: (r) => r.text() },
  { name: "json", read: async (r) => JSON.stringify(await r.json()) },
  { name: "arrayBuffer", read: async (r) => Buffer.from(await r.arrayBuffer()).toString() },
  // bytes(): Node's Response has it; the typings of Node 20 do not.
  { name: "bytes", read: async (r) => Buffer.from(await (r as WithBytes).bytes()).toString() },
  {
    name: "blob",
    read: async (r) => {
      const blob = await r.blob();
      return `${blob.type} ${await blob.text()}`;
    },
  },
  {
    name: "body, chunk by chunk",
    read: async (r) => {
      let text = "";
      for await (const chunk of r.body!) text += Buffer.from(chunk).toString();
      return `${text} used=${r.bodyUsed}`;
    },
  },
  {
    name: "body asked for, then text",
    read: (r) => {
      void r.body;
      return r.text();
    },
  },
  { name: "a Response made of it", read: (r) => new Response(r.body, r).text() },
  {
    name: "clone, both read",
    read: async (r) => {
      const copy = r.clone();
      return `${await copy.text()} ${await r.text()} ${copy.status} ${copy.headers.get("x-request-id")}`;
    },
  },
  {
    name: "text twice",
    read: async (r) => {
      await r.text();
      return r.text().catch((err: unknown) => (err instanceof TypeError ? "TypeError" : String(err)));
    },
  },
];

describe("ScannedResponse", () => {
  for (const { name, read } of readers) {
    test(`${name}: as the response reads it, its counts seen once`, async () => {
      const want = await read(await fetch(url)).catch((err: unknown) => `error ${String(err)}`);
      const { res, seen } = await scanned();
      assert.equal(await read(res).catch((err: unknown) => `error ${String(err)}`), want);
      assert.deepEqual(seen, { input: [1234], output: [5] });
    });
  }

  test("what it says besides its body: as the response says it", async () => {
    const plain = await fetch(url);
    const { res } = await scanned();
    const meta = (r: Response) => [r instanceof Response, r.status, r.ok, r.url, r.bodyUsed, [...r.headers.keys()]];
    assert.deepEqual(meta(res), meta(plain));
    await Promise.all([plain.text(), res.text()]);
    assert.equal(res.bodyUsed, true);
    assert.equal(res.body?.locked, true, "a body read whole is a used stream, as the response's");
    assert.throws(() => res.clone(), TypeError);
  });

  test("a body not read, or cancelled before its counts, says nothing", async () => {
    const unread = await scanned();
    const cancelled = await scanned();
    await cancelled.res.body!.cancel();
    assert.equal(cancelled.res.bodyUsed, true);
    for (const { seen } of [unread, cancelled]) assert.deepEqual(seen, { input: [], output: [] });
  });
});
