// The test harness: real policyd processes, a real HTTP server on 127.0.0.1
// that fails on cue, and the few fakes the client lets tests inject (clock,
// random, logger, an RPC counter). Nothing here mocks policyd.

import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from "node:http";
import { createServer as createTcpServer, type Socket, type Server as TcpServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { after } from "node:test";
import { fileURLToPath } from "node:url";
import { createClient as createConnectClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { Clock, Decision, Logger } from "@policyd/client";
import { type BucketUsage, type CoordinateRequest, JournalService, PolicyService } from "@policyd/client/proto";

/** The package folder (clients/typescript); this file runs from build/test. */
export const packageDir = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

let tmp: string | undefined;
function tmpDir(): string {
  tmp ??= mkdtempSync(join(tmpdir(), "policyd-ts-client-test-"));
  return tmp;
}

/** The policyd repository above this package, for building the daemon. */
function repoRoot(): string {
  for (let d = packageDir; d !== dirname(d); d = dirname(d)) {
    const mod = join(d, "go.mod");
    if (existsSync(mod) && readFileSync(mod, "utf8").startsWith("module github.com/policyd/policyd\n")) return d;
  }
  throw new Error(`no policyd repository above ${packageDir}: set POLICYD_BIN`);
}

let bin: string | undefined;
/** POLICYD_BIN, or a binary built from the repository root. */
export function policydBin(): string {
  if (bin) return bin;
  if (process.env["POLICYD_BIN"]) {
    bin = process.env["POLICYD_BIN"];
    return bin;
  }
  const out = join(tmpDir(), "policyd");
  execFileSync("go", ["build", "-o", out, "./cmd/policyd"], {
    cwd: repoRoot(),
    stdio: ["ignore", "ignore", "inherit"],
  });
  bin = out;
  return bin;
}

/** A running `policyd serve`. */
export interface Daemon {
  addr: string;
  logs: string[];
  stop(): Promise<void>;
  /** SIGKILL: the daemon vanishes, its streams with it. */
  kill(): Promise<void>;
}

/**
 * startDaemon starts policyd on a free loopback port and waits for its
 * "serving" record; extra are more serve flags, e.g. --auth-tokens FILE.
 */
export async function startDaemon(databaseUrl?: string, extra: string[] = []): Promise<Daemon> {
  // Fleet memory off unless a test asks for it (a later --fleet wins): these
  // tests check the client, and one test's failures must not open a breaker
  // or spend a retry budget for the next.
  const args = ["serve", "--listen", "127.0.0.1:0", "--log-format", "json", "--fleet", "off", ...extra];
  if (databaseUrl) args.push("--database-url", databaseUrl);
  // The daemon reads POLICYD_* and DATABASE_URL: give it none of ours.
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v !== undefined && !k.startsWith("POLICYD_") && k !== "DATABASE_URL") env[k] = v;
  }
  const child: ChildProcess = spawn(policydBin(), args, { env, stdio: ["ignore", "ignore", "pipe"] });
  const logs: string[] = [];
  const exited = new Promise<void>((res) => child.once("exit", () => res()));
  const addr = await new Promise<string>((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`policyd did not start serving:\n${logs.join("\n")}`)), 60_000);
    createInterface({ input: child.stderr! }).on("line", (line) => {
      logs.push(line);
      try {
        const rec = JSON.parse(line) as { msg?: string; addr?: string };
        if (rec.msg === "serving" && rec.addr) {
          clearTimeout(timer);
          res(rec.addr);
        }
      } catch {
        // not JSON: keep it in the logs
      }
    });
    void exited.then(() => {
      clearTimeout(timer);
      rej(new Error(`policyd exited before serving:\n${logs.join("\n")}`));
    });
  });
  return {
    addr,
    logs,
    stop: async () => {
      child.kill("SIGTERM");
      const t = setTimeout(() => child.kill("SIGKILL"), 15_000);
      await exited;
      clearTimeout(t);
    },
    kill: async () => {
      child.kill("SIGKILL");
      await exited;
    },
  };
}

const daemons = new Map<string, Promise<Daemon>>();
after(async () => {
  for (const d of daemons.values()) await (await d).stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

/** A daemon of this process's own with extra serve flags, stopped when the tests end. */
export async function daemonWith(key: string, extra: string[]): Promise<Daemon> {
  if (!daemons.has(key)) daemons.set(key, startDaemon(undefined, extra));
  return daemons.get(key)!;
}

/** The token of tenant acme in tokensFile(); and one the daemon does not know. */
export const TOKEN = "acme-typescript-client-token-01";
export const WRONG_TOKEN = "not-a-known-token-typescript-02";

/** tokensFile writes a --auth-tokens file naming tenant acme with TOKEN and returns its path. */
export function tokensFile(): string {
  const path = join(tmpDir(), "tokens");
  writeFileSync(path, `acme ${TOKEN}\n`, { mode: 0o600 });
  return path;
}

/** PEM files of a throwaway CA, a server certificate for 127.0.0.1 and localhost, and a client certificate. */
export interface Certs {
  ca: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
}

let certs: Certs | undefined;
/** makeCerts generates Certs once, with the openssl command-line tool (P-256 keys, valid one day). */
export function makeCerts(): Certs {
  if (certs) return certs;
  const dir = mkdtempSync(join(tmpDir(), "certs-"));
  const openssl = (...args: string[]) =>
    execFileSync("openssl", args, { cwd: dir, stdio: ["ignore", "ignore", "pipe"] });
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
  openssl(
    "req",
    "-x509",
    ...ec,
    "-keyout",
    "ca-key.pem",
    "-out",
    "ca.pem",
    "-days",
    "1",
    "-subj",
    "/CN=policyd ts test CA",
    "-addext",
    "basicConstraints=critical,CA:TRUE",
    "-addext",
    "keyUsage=critical,keyCertSign,digitalSignature",
  );
  for (const [name, cn, ext] of [
    ["server", "localhost", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"],
    ["client", "agent", "extendedKeyUsage=clientAuth\n"],
  ] as const) {
    writeFileSync(join(dir, `${name}.ext`), `keyUsage=critical,digitalSignature\n${ext}`);
    openssl("req", ...ec, "-keyout", `${name}-key.pem`, "-out", `${name}.csr`, "-subj", `/CN=${cn}`);
    openssl(
      "x509",
      "-req",
      "-in",
      `${name}.csr`,
      "-CA",
      "ca.pem",
      "-CAkey",
      "ca-key.pem",
      "-CAcreateserial",
      "-days",
      "1",
      "-out",
      `${name}.pem`,
      "-extfile",
      `${name}.ext`,
    );
  }
  const f = (n: string) => join(dir, n);
  certs = {
    ca: f("ca.pem"),
    serverCert: f("server.pem"),
    serverKey: f("server-key.pem"),
    clientCert: f("client.pem"),
    clientKey: f("client-key.pem"),
  };
  return certs;
}

/** Whether the openssl command is there to make certificates. */
export function haveOpenssl(): boolean {
  try {
    execFileSync("openssl", ["version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

/** The address of this process's daemon without a journal. */
export async function daemonAddr(): Promise<string> {
  if (!daemons.has("plain")) daemons.set("plain", startDaemon());
  return (await daemons.get("plain")!).addr;
}

/**
 * The address of this process's daemon journaling into TEST_DATABASE_URL;
 * undefined (skip the test) when it is unset, unless POLICYD_REQUIRE_JOURNAL=1
 * (scripts/test.sh sets it), which fails the test.
 */
export async function journalDaemonAddr(): Promise<string | undefined> {
  const url = process.env["TEST_DATABASE_URL"];
  if (!url) {
    if (process.env["POLICYD_REQUIRE_JOURNAL"] === "1")
      throw new Error("TEST_DATABASE_URL is not set, and POLICYD_REQUIRE_JOURNAL=1");
    return undefined;
  }
  if (!daemons.has("journal")) daemons.set("journal", startDaemon(url));
  return (await daemons.get("journal")!).addr;
}

/** Generated stubs on addr, to read the journal and ask policyd directly. */
export function rawClients(addr: string) {
  const transport = createGrpcTransport({ baseUrl: `http://${addr}` });
  return {
    policy: createConnectClient(PolicyService, transport),
    journal: createConnectClient(JournalService, transport),
  };
}

/** One scripted answer of a flaky server. */
export interface Step {
  status?: number;
  headers?: Record<string, string>;
  body?: string;
  /** Close the connection without answering. */
  drop?: boolean;
  /** Wait this long before answering (or until the client goes away). */
  delayMs?: number;
}

/** A real HTTP server answering each request with the next step, repeating the last. */
export interface Flaky {
  url: string;
  hits: number;
  /** Each request's method and path, in order. */
  requests: string[];
  /** Each request's body, in order (filled as the bodies arrive). */
  bodies: string[];
  /** Each request's headers, in order. */
  headers: IncomingHttpHeaders[];
  close(): Promise<void>;
}

const servers: Server[] = [];
after(async () => {
  for (const s of servers) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
});

export async function flaky(...steps: Step[]): Promise<Flaky> {
  const state: Flaky = { url: "", hits: 0, requests: [], bodies: [], headers: [], close: async () => {} };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    state.hits++;
    state.requests.push(`${req.method} ${req.url}`);
    state.headers.push(req.headers);
    const s = steps[Math.min(state.hits, steps.length) - 1] ?? {};
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => state.bodies.push(Buffer.concat(chunks).toString()));
    const answer = () => {
      if (s.drop) {
        req.socket.destroy();
        return;
      }
      res.writeHead(s.status ?? 200, { "content-type": "application/json", ...(s.headers ?? {}) });
      res.end(s.body ?? "");
    };
    if (s.delayMs) {
      const t = setTimeout(answer, s.delayMs);
      res.on("close", () => clearTimeout(t));
    } else {
      answer();
    }
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const a = server.address();
  if (!a || typeof a === "string") throw new Error("no address");
  state.url = `http://127.0.0.1:${a.port}`;
  state.close = async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  };
  return state;
}

/** A fake clock whose sleeps return at once, moving its time forward; it records each wait. */
export class FakeClock implements Clock {
  waits: number[] = [];
  #now = Date.now();
  now(): number {
    return this.#now;
  }
  async sleep(ms: number, signal?: AbortSignal): Promise<void> {
    signal?.throwIfAborted();
    this.waits.push(ms);
    this.#now += ms;
  }
}

/** Records every decision a client takes. */
export function decisions(): { all: Decision[]; onDecision: (e: { decision: Decision }) => void } {
  const all: Decision[] = [];
  return { all, onDecision: (e) => all.push(e.decision) };
}

/**
 * Counts the RPCs a client makes, by method name: the unary ones in calls,
 * the background fleet stream (Coordinate) apart in streams.
 */
export function rpcCounter(): { calls: string[]; streams: string[]; interceptor: Interceptor } {
  const calls: string[] = [];
  const streams: string[] = [];
  return {
    calls,
    streams,
    interceptor: (next) => async (req) => {
      (req.method.name === "Coordinate" ? streams : calls).push(req.method.name);
      return next(req);
    },
  };
}

/** A logger that keeps what it is told. */
export function memoryLogger(): Logger & { warnings: string[]; infos: string[] } {
  const warnings: string[] = [];
  const infos: string[] = [];
  return {
    warnings,
    infos,
    warn: (m: string) => void warnings.push(m),
    info: (m: string) => void infos.push(m),
    debug: () => {},
  };
}

/** A loopback address nothing listens on. */
export async function closedAddr(): Promise<string> {
  const s = createTcpServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const a = s.address();
  await new Promise((r) => s.close(r));
  if (!a || typeof a === "string") throw new Error("no address");
  return `127.0.0.1:${a.port}`;
}

/** A loopback server that accepts connections and never answers: a hung daemon. */
export async function hungAddr(): Promise<string> {
  const sockets: Socket[] = [];
  const s: TcpServer = createTcpServer((sock) => void sockets.push(sock));
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  after(async () => {
    for (const sock of sockets) sock.destroy();
    await new Promise((r) => s.close(r));
  });
  const a = s.address();
  if (!a || typeof a === "string") throw new Error("no address");
  return `127.0.0.1:${a.port}`;
}

export const bodies = {
  overloaded: `{"error":{"message":"The engine is currently overloaded, please try again later.","type":"server_error","code":"overloaded"}}`,
  rateLimit: `{"error":{"message":"Rate limit reached for gpt-4o on requests per min (RPM)","type":"requests","code":"rate_limit_exceeded"}}`,
  badKey: `{"error":{"message":"Incorrect API key provided: sk-xxx.","type":"invalid_request_error","code":"invalid_api_key"}}`,
  serverError: `{"error":{"message":"The server had an error while processing your request.","type":"server_error","code":"server_error"}}`,
  contextTooLong: `{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}`,
  chatOk: `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the fake model."},"finish_reason":"stop"}]}`,
};

export const AUTH_RECOVERY = "Fix the API credentials (key, token or endpoint), then run again.";

/** What the fake provider counted (GET /fake/stats). */
export interface FakeStats {
  requests: number;
  ok: number;
  rate_limited: number;
  failed: number;
  streams: number;
  input_tokens: number;
  output_tokens: number;
}

/** A failure the fake provider gives its next requests (POST /fake/fail). */
export interface FakeFailure {
  status?: number;
  count?: number;
  retry_after?: string;
  body?: string;
  cut_stream?: boolean;
}

/** A running bin/policyd-fakeprovider: a local OpenAI and Anthropic stand-in. */
export interface FakeProvider {
  /** http://127.0.0.1:PORT */
  url: string;
  stats(): Promise<FakeStats>;
  fail(f: FakeFailure): Promise<void>;
}

let fakeBin: string | undefined;
/** FAKEPROVIDER_BIN, or a binary built from the repository root. */
function fakeProviderBin(): string {
  if (fakeBin) return fakeBin;
  fakeBin = process.env["FAKEPROVIDER_BIN"];
  if (!fakeBin) {
    fakeBin = join(tmpDir(), "policyd-fakeprovider");
    execFileSync("go", ["build", "-o", fakeBin, "./cmd/policyd-fakeprovider"], {
      cwd: repoRoot(),
      stdio: ["ignore", "ignore", "inherit"],
    });
  }
  return fakeBin;
}

const fakes: ChildProcess[] = [];
after(() => {
  for (const f of fakes) f.kill("SIGKILL");
});

/**
 * fakeProvider starts a fake provider of its own (flags: -rpm, -tpm,
 * -chunk-delay, ...), stopped when the tests end; it reads the address
 * from the first line it prints.
 */
export async function fakeProvider(...flags: string[]): Promise<FakeProvider> {
  const child = spawn(fakeProviderBin(), flags, { stdio: ["ignore", "pipe", "inherit"] });
  fakes.push(child);
  const url = await new Promise<string>((res, rej) => {
    const timer = setTimeout(() => rej(new Error("the fake provider did not start")), 30_000);
    child.once("exit", (code) => rej(new Error(`the fake provider exited (${code})`)));
    createInterface({ input: child.stdout! }).once("line", (line) => {
      clearTimeout(timer);
      const m = /^listening on (http:\/\/\S+)$/.exec(line);
      if (m) res(m[1]!);
      else rej(new Error(`the fake provider said ${JSON.stringify(line)}`));
    });
  });
  return {
    url,
    stats: async () => (await (await fetch(`${url}/fake/stats`)).json()) as FakeStats,
    fail: async (f) => {
      const res = await fetch(`${url}/fake/fail`, { method: "POST", body: JSON.stringify(f) });
      if (res.status !== 204) throw new Error(`fake/fail: ${res.status} ${await res.text()}`);
    },
  };
}

/** The fleet reports a client sends up its Coordinate stream, read as they go (an interceptor). */
export function reportTap(): { usages: BucketUsage[]; interceptor: Interceptor } {
  const usages: BucketUsage[] = [];
  return {
    usages,
    interceptor: (next) => async (req) => {
      if (!req.stream || req.method.name !== "Coordinate") return next(req);
      const source = req.message as AsyncIterable<CoordinateRequest>;
      async function* tapped() {
        for await (const m of source) {
          usages.push(...m.usage);
          yield m;
        }
      }
      return next({ ...req, message: tapped() } as typeof req);
    },
  };
}
