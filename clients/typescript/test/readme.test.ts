// Every ```js example of README.md runs as written — against a real policyd
// and a fake provider on 127.0.0.1 — and type-checks as TypeScript.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { before, describe, test } from "node:test";
import { promisify } from "node:util";
import {
  bodies,
  daemonAddr,
  daemonWith,
  fakeProvider,
  flaky,
  haveOpenssl,
  makeCerts,
  packageDir,
  rawClients,
  TOKEN,
  tokensFile,
} from "./harness.js";

const run = promisify(execFile);

/** The README's ```js blocks, in order. */
function examples(): string[] {
  const md = readFileSync(join(packageDir, "README.md"), "utf8");
  return [...md.matchAll(/^```js\n([\s\S]*?)^```$/gm)].map((m) => m[1]!);
}

// Examples run from inside the package, so that "@policyd/client" resolves to
// this package's dist/ (a self-reference) and "openai" to its dev dependency.
const dir = join(packageDir, "build", "readme");

async function runExample(i: number, env: Record<string, string>, args: string[] = []) {
  const file = join(dir, `example-${i}.mjs`);
  try {
    const base = Object.fromEntries(
      Object.entries(process.env).filter(([k]) => !k.startsWith("POLICYD_") || k === "POLICYD_BIN"),
    );
    const { stdout, stderr } = await run(process.execPath, [file, ...args], {
      env: { ...base, ...env },
      timeout: 30_000,
    });
    return { code: 0, stdout, stderr };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string };
    return { code: err.code ?? -1, stdout: err.stdout ?? "", stderr: err.stderr ?? "" };
  }
}

describe("README examples", { concurrency: true }, () => {
  const blocks = examples();
  before(() => {
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    blocks.forEach((code, i) => {
      writeFileSync(join(dir, `example-${i}.mjs`), code);
      writeFileSync(join(dir, `example-${i}.ts`), code);
    });
  });

  test("there are seven, each tested below", () => assert.equal(blocks.length, 7));

  test("they type-check as strict TypeScript", async () => {
    writeFileSync(
      join(dir, "tsconfig.json"),
      JSON.stringify({
        extends: "../../tsconfig.json",
        compilerOptions: { noEmit: true, rootDir: "." },
        include: ["*.ts"],
      }),
    );
    const tsc = join(packageDir, "node_modules", "typescript", "bin", "tsc");
    const r = await run(process.execPath, [tsc, "-p", join(dir, "tsconfig.json")]).catch((e: { stdout: string }) =>
      assert.fail(e.stdout),
    );
    assert.equal(r.stdout, "");
  });

  test("the one-line transport: both SDKs answer, a 529 retried by policyd", async () => {
    const fake = await fakeProvider();
    await fake.fail({ status: 529 });
    const r = await runExample(0, {
      POLICYD_ADDR: await daemonAddr(),
      OPENAI_BASE_URL: `${fake.url}/v1`,
      OPENAI_API_KEY: "sk-test",
      ANTHROPIC_BASE_URL: fake.url,
      ANTHROPIC_API_KEY: "sk-ant-test",
    });
    assert.equal(r.code, 0, r.stderr);
    const reply = "ok! ".repeat(20);
    assert.equal(r.stdout, `${reply}\n${reply}\n`);
    const stats = await fake.stats();
    assert.deepEqual([stats.requests, stats.failed, stats.ok], [3, 1, 2]);
  });

  test("wrap an LLM call: a 429 is retried, the answer printed", async () => {
    const srv = await flaky(
      { status: 429, headers: { "retry-after-ms": "100" }, body: bodies.rateLimit },
      { status: 200, body: bodies.chatOk },
    );
    const r = await runExample(1, {
      POLICYD_ADDR: await daemonAddr(),
      OPENAI_BASE_URL: `${srv.url}/v1`,
      OPENAI_API_KEY: "sk-test",
    });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "Hello from the fake model.\n");
    assert.deepEqual(srv.requests, ["POST /v1/chat/completions", "POST /v1/chat/completions"]);
  });

  test("wrap a web fetch: a dropped connection is retried, the page printed", async () => {
    const srv = await flaky({ drop: true }, { status: 200, body: "<html>hello</html>" });
    const r = await runExample(2, { POLICYD_ADDR: await daemonAddr() }, [srv.url]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "<html>hello</html>\n");
    assert.equal(srv.hits, 2);
  });

  test("when it gives up: the recovery action, exit code 1", async () => {
    const srv = await flaky({ status: 401, body: bodies.badKey });
    const r = await runExample(3, { POLICYD_ADDR: await daemonAddr() }, [srv.url]);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /\[AUTH_INVALID, rule web\.auth_required\]/);
    assert.match(r.stderr, /^Authentication required; this page is not fetchable anonymously\.$/m);
    assert.equal(srv.hits, 1);
  });

  test("tracing: the span printed carries the decision, by policyd, and the retry", async () => {
    const srv = await flaky({ status: 503 }, { status: 200, body: "<html>traced</html>" });
    const r = await runExample(6, { POLICYD_ADDR: await daemonAddr() }, [srv.url]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(srv.hits, 2);
    assert.match(r.stdout, /name: 'fetch page'/);
    assert.match(r.stdout, /name: 'policyd\.decision'/);
    assert.match(r.stdout, /'policyd\.decided_by': 'policyd'/);
    assert.match(r.stdout, /'policyd\.action': 'RETRY'/);
    assert.match(r.stdout, /'http\.request\.resend_count': 1/);
  });

  test(
    "authentication and TLS: with POLICYD_TOKEN the page, without it the error naming it",
    {
      skip: haveOpenssl() ? false : "no openssl",
    },
    async () => {
      const c = makeCerts();
      const d = await daemonWith("tls", [
        "--auth-tokens",
        tokensFile(),
        "--tls-cert",
        c.serverCert,
        "--tls-key",
        c.serverKey,
      ]);
      const env = { POLICYD_ADDR: d.addr, POLICYD_TLS_CA: c.ca };
      let srv = await flaky({ status: 503 }, { status: 200, body: "<html>secure</html>" });
      let r = await runExample(5, { ...env, POLICYD_TOKEN: TOKEN }, [srv.url]);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout, "<html>secure</html>\n");
      assert.equal(srv.hits, 2);

      srv = await flaky({ status: 503 }, { status: 200 });
      r = await runExample(5, env, [srv.url]);
      assert.equal(r.code, 1, r.stderr);
      assert.match(r.stderr, /UNAUTHENTICATED: missing bearer token.*; set POLICYD_TOKEN/);
      assert.equal(srv.hits, 1);
      assert.ok(!r.stderr.includes(TOKEN) && !d.logs.join("\n").includes(TOKEN));
    },
  );
});

// Alone, after the others: a fresh process's first call waits at most 100 ms
// for its first assignment, which a machine busy starting four more
// processes may not give it.
describe("README examples: the fleet gate", () => {
  test("the fleet gate: with gpt-4o's breaker open, the call goes to the fallback the fleet names", async () => {
    const policy = join(dir, "fleet-policy.yaml");
    writeFileSync(
      policy,
      "fleet:\n  breaker: {min_volume: 3, min_clients: 1}\nfallbacks:\n  openai/gpt-4o: [openai/gpt-4o-mini]\n",
    );
    const d = await daemonWith("readme-fleet", ["--fleet", "on", "--policy", policy]);
    for (let i = 0; i < 3; i++) {
      const failure = { provider: "openai", model: "gpt-4o", httpStatus: 503 };
      await rawClients(d.addr).policy.nextDelay({ failure, attempt: 1, clientId: "another-agent" });
    }
    const srv = await flaky({ status: 200, headers: { "x-ratelimit-limit-requests": "500" }, body: bodies.chatOk });
    const r = await runExample(4, {
      POLICYD_ADDR: d.addr,
      OPENAI_BASE_URL: `${srv.url}/v1`,
      OPENAI_API_KEY: "sk-test",
    });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "Hello from the fake model.\n");
    assert.equal(srv.hits, 1);
    assert.equal(JSON.parse(srv.bodies[0]!).model, "gpt-4o-mini", "the first attempt to gpt-4o was not sent");
  });
});
