// clients/testdata/transport_hosts.json: the fetch transport's host table
// and what a request calls when the transport's options do not say; the Go
// and Python transports read the same file.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { modelOf, operationOf, PROVIDER_HOSTS, providerOf } from "@policyd/client";

const TESTDATA = fileURLToPath(new URL("../../../testdata/", import.meta.url));

const vectors = JSON.parse(readFileSync(`${TESTDATA}transport_hosts.json`, "utf8")) as {
  hosts: Record<string, string>;
  cases: { id: string; url: string; body: string; provider: string; model: string }[];
};

describe("vectors: transport_hosts.json", () => {
  test("the client's host table is the file's", () => assert.deepEqual({ ...PROVIDER_HOSTS }, vectors.hosts));

  for (const c of vectors.cases) {
    test(c.id, () => {
      const url = new URL(c.url);
      assert.equal(providerOf(url), c.provider, "provider");
      assert.equal(modelOf(c.body === "" ? undefined : c.body, url), c.model, "model");
    });
  }

  test("a host with its trailing dot is the host", () => {
    assert.equal(providerOf(new URL("https://api.anthropic.com./v1/messages")), "anthropic");
  });

  test("a body larger than 8 MiB names no model", () => {
    const url = new URL("https://api.openai.com/v1/chat/completions");
    const big = `{"model":"gpt-4o","pad":"${"x".repeat(8 << 20)}"}`;
    assert.equal(modelOf(big, url), "");
    assert.equal(modelOf(`{"model":"gpt-4o","pad":"x"}`, url), "gpt-4o");
  });
});

describe("the operation a path names", () => {
  const cases: [string, string][] = [
    ["/v1/chat/completions", "chat"],
    ["/openai/deployments/gpt4o/chat/completions", "chat"],
    ["/v1/completions", "completion"],
    ["/v1/responses", "responses"],
    ["/v1/embeddings/", "embeddings"],
    ["/v1/messages", "messages"],
    ["/v1/messages/count_tokens", "messages.count_tokens"],
    ["/v1beta/models/gemini-1.5-pro:generateContent", "generate_content"],
    ["/v1beta/models/gemini-1.5-pro:streamGenerateContent", "generate_content"],
    ["/v1beta/models/gemini-1.5-pro:countTokens", "model.count_tokens"],
    ["/v1beta/models/text-embedding-004:embedContent", "embed_content"],
    ["/v1beta/models/gemini-1.5-pro:unknownMethod", ""],
    ["/v1/files", ""],
    ["/", ""],
  ];
  for (const [path, want] of cases)
    test(`${path} → ${JSON.stringify(want)}`, () => assert.equal(operationOf(path), want));
});
