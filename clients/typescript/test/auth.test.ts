// Tokens and TLS against real policyd processes started with --auth-tokens,
// TLS and mutual TLS (certificates made with the openssl command).

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { checkResponse, createClient, emptyFailure, HttpError, PolicydAuthError } from "@policyd/client";
import {
  daemonWith,
  decisions,
  FakeClock,
  flaky,
  haveOpenssl,
  makeCerts,
  memoryLogger,
  TOKEN,
  tokensFile,
  WRONG_TOKEN,
} from "./harness.js";

const web = { provider: "web", operation: "web_fetch", method: "GET", profile: "web_fetch" };

function get(url: string) {
  return async ({ signal }: { signal: AbortSignal }) => (await checkResponse(await fetch(url, { signal }))).text();
}

function noToken(...texts: string[]) {
  for (const t of texts) {
    assert.ok(!t.includes(TOKEN) && !t.includes(WRONG_TOKEN), `a token leaked into: ${t}`);
  }
}

/** Runs fn with env set, restoring it afterwards (tests in this file that use it run one at a time). */
async function withEnv<T>(env: Record<string, string | undefined>, fn: () => Promise<T>): Promise<T> {
  const saved = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
  const apply = (e: Record<string, string | undefined>) => {
    for (const [k, v] of Object.entries(e)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  };
  apply(env);
  try {
    return await fn();
  } finally {
    apply(saved);
  }
}

const tokenDaemon = () => daemonWith("tokens", ["--auth-tokens", tokensFile()]);

describe("bearer tokens", () => {
  test("the right token: calls succeed with policyd's decisions", async () => {
    const d = await tokenDaemon();
    const srv = await flaky({ status: 503 }, { status: 200, body: "fine" });
    const dec = decisions();
    const logger = memoryLogger();
    const client = createClient({
      address: d.addr,
      token: TOKEN,
      clock: new FakeClock(),
      onDecision: dec.onDecision,
      logger,
    });
    assert.equal(await client.call(get(srv.url), web), "fine");
    assert.equal(dec.all.length, 1);
    assert.equal(dec.all[0]!.failOpen, false);
    assert.ok((await client.classify({ ...emptyFailure(), httpStatus: 429 })).rule);
    noToken(...logger.warnings, ...logger.infos, ...d.logs);
  });

  for (const [name, token, says] of [
    ["no token", "", /missing bearer token: .*; set POLICYD_TOKEN/],
    [
      "a wrong token",
      WRONG_TOKEN,
      /invalid bearer token; the token sent \(POLICYD_TOKEN or the token option\) is not in/,
    ],
  ] as const) {
    test(`${name}: a PolicydAuthError after one attempt, not a fail-open retry`, async () => {
      const d = await tokenDaemon();
      const srv = await flaky({ status: 503 }, { status: 200 });
      const dec = decisions();
      const logger = memoryLogger();
      const client = createClient({ address: d.addr, token, journal: true, onDecision: dec.onDecision, logger });
      const err = await client.call(get(srv.url), web).then(
        () => assert.fail("the call succeeded"),
        (e: unknown) => e,
      );
      assert.ok(err instanceof PolicydAuthError, String(err));
      assert.match(err.message, says);
      assert.equal(err.method, "BeginContext"); // a journaled call's first RPC, as in every client
      assert.equal(err.tokenSet, token !== "");
      assert.ok(err.error instanceof HttpError && err.error.status === 503);
      assert.equal(srv.hits, 1);
      assert.deepEqual(dec.all, []);
      assert.ok(!logger.warnings.some((w) => w.includes("fail-open")), logger.warnings.join("\n"));
      await assert.rejects(client.classify(new Error("x")), PolicydAuthError);
      noToken(err.message, ...logger.warnings, ...logger.infos, ...d.logs);
    });
  }

  test('POLICYD_TOKEN is read when the token option is unset; token: "" sends none', async () => {
    const d = await tokenDaemon();
    await withEnv({ POLICYD_TOKEN: TOKEN }, async () => {
      assert.ok((await createClient({ address: d.addr }).classify(new Error("socket hang up"))).rule);
      await assert.rejects(createClient({ address: d.addr, token: "" }).classify(new Error("x")), PolicydAuthError);
    });
  });

  test("no token in plaintext beyond loopback", () => {
    assert.throws(
      () => createClient({ address: "10.20.30.40:7433", token: TOKEN }),
      (e: Error) => {
        noToken(e.message);
        return /not sending the bearer token \(POLICYD_TOKEN\) in plaintext to 10\.20\.30\.40:7433/.test(e.message);
      },
    );
    createClient({ address: "localhost:7433", token: TOKEN });
    createClient({ address: "[::1]:7433", token: TOKEN });
  });
});

describe("TLS", { skip: haveOpenssl() ? false : "the openssl command is not installed" }, () => {
  test("server TLS with a CA file and a token", async () => {
    const c = makeCerts();
    const d = await daemonWith("tls", [
      "--auth-tokens",
      tokensFile(),
      "--tls-cert",
      c.serverCert,
      "--tls-key",
      c.serverKey,
    ]);
    const srv = await flaky({ status: 503 }, { status: 200, body: "over tls" });
    const client = createClient({ address: d.addr, token: TOKEN, tlsCaFile: c.ca, clock: new FakeClock() });
    assert.equal(await client.call(get(srv.url), web), "over tls");
  });

  test("mutual TLS, from options and from POLICYD_TLS_*; without a client certificate the handshake fails", async () => {
    const c = makeCerts();
    const d = await daemonWith("mtls", [
      "--auth-tokens",
      tokensFile(),
      "--tls-cert",
      c.serverCert,
      "--tls-key",
      c.serverKey,
      "--tls-client-ca",
      c.ca,
    ]); // prettier-ignore
    const client = createClient({
      address: d.addr,
      token: TOKEN,
      tlsCaFile: c.ca,
      tlsCertFile: c.clientCert,
      tlsKeyFile: c.clientKey,
    });
    assert.ok((await client.classify(new Error("socket hang up"))).rule);
    await withEnv(
      { POLICYD_TOKEN: TOKEN, POLICYD_TLS_CA: c.ca, POLICYD_TLS_CERT: c.clientCert, POLICYD_TLS_KEY: c.clientKey },
      async () => {
        assert.ok((await createClient({ address: d.addr }).classify(new Error("socket hang up"))).rule);
      },
    );
    await withEnv(
      { POLICYD_TOKEN: TOKEN, POLICYD_TLS_CA: c.ca, POLICYD_TLS_CERT: undefined, POLICYD_TLS_KEY: undefined },
      async () => {
        await assert.rejects(createClient({ address: d.addr }).classify(new Error("x")));
      },
    );
  });

  test("configuration errors are createClient's", () => {
    const c = makeCerts();
    assert.throws(
      () => createClient({ tlsCaFile: "/nonexistent/ca.pem" }),
      /cannot read the TLS CA file \/nonexistent\/ca\.pem/,
    );
    assert.throws(() => createClient({ tlsCertFile: c.clientCert }), /both the certificate and the key/);
  });
});
