// FleetStream: the fleet stream's I/O (docs/clients.md, "The fleet gate"):
// the one background Coordinate stream per client that sends the table's
// reports and applies the assignments: opened at the first gated call, a
// report about every second, reopened with backoff after it breaks (at once
// when a call to policyd gets through), given up when the daemon runs
// without fleet memory. Also its own HTTP/2 transport, and the waits that
// never keep Node running. The table is fleet.ts's, the gate's checks
// gate.ts's, the texts texts.ts's; coordinate.ts puts the table and the
// stream together for a client.

import type { ClientHttp2Stream, OutgoingHttpHeaders, SecureClientSessionOptions } from "node:http2";
import { isIP, connect as netConnect } from "node:net";
import type { Duplex } from "node:stream";
import { connect as tlsConnect } from "node:tls";
import type { MessageInitShape } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createClient as createConnectClient,
  type Interceptor,
  type Transport,
} from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import type { FleetTable } from "./fleet.js";
import { type CoordinateRequestSchema, FleetService } from "./gen/policyd/v1/fleet_pb.js";
import { FLEET_LIMITS } from "./limits.js";

/** @internal What the stream needs from its client. */
export interface StreamDeps {
  transport: Transport;
  clientId: string;
  profile: string;
  /** Bounds the wait for the daemon to end the stream at close. */
  closeTimeoutMs: number;
  debug: (message: string) => void;
  warnOnce: (key: string, message: string) => void;
  /** Releases the stream's own connection, if it has one. */
  release?: () => void;
}

type Request = MessageInitShape<typeof CoordinateRequestSchema>;

// The stream's timing (clients/testdata/limits.json, limits.ts).
const { client: C } = FLEET_LIMITS;
const REPORT_EVERY_MS = C.reportIntervalMs;
const REPORT_JITTER = C.reportJitter;
const BACKOFF_FIRST_MS = C.reconnectInitialMs;
const BACKOFF_MAX_MS = C.reconnectMaxMs;
// While policyd is unreachable the stream is tried again about every second
// (± 20 %), as the Go client's connection redials (0.5 s growing to 1 s), so
// that it is back within about a second of policyd's return; a daemon that
// answered and refused is retried with the backoff above.
const REDIAL_MS = 1000;
const REDIAL_JITTER = 0.2;

/** @internal The Coordinate stream of one client, over its table. */
export class FleetStream {
  readonly #table: FleetTable;
  readonly #d: StreamDeps;
  /** The stream loop, once started. */
  #loop: Promise<void> | undefined;
  #closed = false;
  /** Aborted by close: ends the pauses between streams and reports. */
  readonly #closing = new AbortController();
  /** The running stream's controller, and whether the daemon answered on it. */
  #stream: AbortController | undefined;
  #heard = false;
  /** The stream is down, between a break and the next try: first calls do not wait. */
  #down = false;
  /** Ends the wait for the next report: send one now. */
  #wake: AbortController | undefined;
  #flushWanted = false;
  /** Ends the pause before the stream reopens: policyd answered a call. */
  #reconnect: AbortController | undefined;

  constructor(table: FleetTable, deps: StreamDeps) {
    this.#table = table;
    this.#d = deps;
  }

  /** Whether a first call may wait for its assignment: the stream is up or being opened. */
  get reachable(): boolean {
    return !this.#down && !this.#table.off && !this.#closed;
  }

  /** Opens the stream unless it runs, is closed, or the daemon has no fleet memory. */
  start(): void {
    if (this.#loop || this.#closed || this.#table.off) return;
    this.#loop = this.#run();
  }

  /** Sends a report now rather than at the next tick. */
  flush(): void {
    this.#flushWanted = true;
    this.#wake?.abort();
  }

  /**
   * daemonAnswered: a unary call got through, so policyd is back; a broken
   * stream reopens now rather than after its backoff.
   */
  daemonAnswered(): void {
    if (this.#down) this.#reconnect?.abort();
  }

  /**
   * close sends what is left to report, half-closes the stream and waits
   * (at most closeTimeoutMs) for the daemon to end it, then cancels it.
   * Nothing reopens the stream.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#closing.abort();
    if (this.#loop) {
      // This timer keeps Node running while close is awaited (the stream's socket does not).
      let timer: ReturnType<typeof setTimeout> | undefined;
      const timeout = new Promise<void>((res) => {
        timer = setTimeout(res, this.#d.closeTimeoutMs);
      });
      await Promise.race([this.#loop, timeout]);
      clearTimeout(timer);
      this.#stream?.abort(new ConnectError("client closed", Code.Canceled));
      await this.#loop;
    }
    this.#d.release?.();
  }

  /** The stream loop: a stream, then a pause with backoff, until closed or the daemon says no. */
  async #run(): Promise<void> {
    let breaks = 0;
    for (;;) {
      let heard: boolean;
      let unreachable = false;
      try {
        heard = await this.#session();
        if (!this.#closed) this.#d.debug("policyd: the daemon ended the fleet stream; reopening it");
      } catch (err) {
        heard = this.#heard;
        const ce = ConnectError.from(err);
        unreachable = !heard && ce.code === Code.Unavailable;
        if (!this.#closed) this.#failed(ce);
      }
      this.#down = true;
      this.#table.answerAll(); // first calls waiting for this stream go on without it
      if (this.#closed || this.#table.off) break;
      breaks = heard ? 1 : breaks + 1;
      const cap = Math.min(BACKOFF_MAX_MS, BACKOFF_FIRST_MS * 2 ** Math.min(breaks - 1, 10));
      // Timing jitter comes from Math.random, not the client's random source, which the gate's draws use.
      const wait =
        unreachable && breaks > 1
          ? REDIAL_MS * (1 - REDIAL_JITTER + 2 * REDIAL_JITTER * Math.random())
          : Math.random() * cap;
      const reconnect = new AbortController();
      this.#reconnect = reconnect;
      await pause(wait, this.#closing.signal, reconnect.signal);
      this.#reconnect = undefined;
      if (reconnect.signal.aborted) breaks = 0; // policyd answered a call: it is back, the backoff starts over
      if (this.#closed) break;
      this.#down = false;
    }
  }

  /** One stream: true when the daemon answered at least once. */
  async #session(): Promise<boolean> {
    const ac = new AbortController();
    this.#stream = ac;
    this.#heard = false;
    this.#table.resubscribe(); // a new stream knows no target
    const fleet = createConnectClient(FleetService, this.#d.transport);
    try {
      for await (const res of fleet.coordinate(this.#requests(ac.signal), { signal: ac.signal })) {
        this.#heard = true;
        this.#table.apply(res);
      }
      return this.#heard;
    } finally {
      ac.abort();
      this.#stream = undefined;
    }
  }

  /**
   * What goes up the stream: the client id and profile, then the reports;
   * a last one at close. A report is made when the transport asks for the
   * next message, which it then sends: its counts are taken out then, and
   * counts made while no stream asks stay for the next report.
   */
  async *#requests(signal: AbortSignal): AsyncGenerator<Request> {
    yield { clientId: this.#d.clientId, profile: this.#d.profile, usage: this.#table.report() };
    while (!signal.aborted) {
      if (!this.#flushWanted) {
        const wake = new AbortController();
        this.#wake = wake;
        const every = REPORT_EVERY_MS * (1 - REPORT_JITTER + 2 * REPORT_JITTER * Math.random());
        await pause(every, this.#closing.signal, signal, wake.signal);
        this.#wake = undefined;
      }
      this.#flushWanted = false;
      if (signal.aborted) return;
      // The last report is one taken after close: a close that comes while
      // an earlier report waits to be sent gets one more.
      const last = this.#closed;
      const usage = this.#table.report();
      if (usage.length > 0) yield { usage };
      if (last) return; // half-close: the daemon ends the stream
    }
  }

  /** A stream failed: give up for good, warn once, or just try again later. */
  #failed(ce: ConnectError): void {
    switch (ce.code) {
      case Code.FailedPrecondition:
      case Code.Unimplemented:
        // --fleet off, or a daemon that predates the stream: stop trying; the gate admits everything.
        this.#table.disable();
        this.#d.debug(
          `policyd: no fleet stream (${Code[ce.code]}: ${ce.rawMessage}); the fleet gate admits every call`,
        );
        return;
      case Code.Unauthenticated:
      case Code.PermissionDenied:
      case Code.InvalidArgument:
        this.#d.warnOnce(
          `Coordinate/${ce.code}`,
          `policyd: the daemon refused the fleet stream (${Code[ce.code]}: ${ce.rawMessage}); calls go on without fleet assignments`,
        );
        return;
      default:
        this.#d.debug(
          `policyd: the fleet stream broke (${Code[ce.code]}: ${ce.rawMessage}); reopening it with backoff`,
        );
    }
  }
}

/**
 * Resolves when p does, after ms, or when signal aborts, whichever is
 * first. Its timer keeps Node running: a call is under way. When it fires,
 * input already received is read first (an event loop that was busy past
 * ms must not lose an answer that came in time).
 */
export function waitFor(p: Promise<void>, ms: number, signal: AbortSignal): Promise<void> {
  if (ms <= 0 || signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(() => setImmediate(done), ms);
    signal.addEventListener("abort", done, { once: true });
    void p.then(done);
  });
}

/** Resolves after ms, or at once when any signal aborts; its timer does not keep Node running. */
export function pause(ms: number, ...signals: AbortSignal[]): Promise<void> {
  return new Promise((resolve) => {
    if (signals.some((s) => s.aborted)) return resolve();
    const done = () => {
      clearTimeout(timer);
      for (const s of signals) s.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, Math.max(0, ms));
    timer.unref?.();
    for (const s of signals) s.addEventListener("abort", done, { once: true });
  });
}

/**
 * @internal streamTransport is the stream's own gRPC transport: its own
 * HTTP/2 connection, with keepalive pings every 30 s while the stream is
 * open (policyd allows one every 15 s), whose socket never keeps Node
 * running: a script that forgets close() still exits. release closes the
 * connection.
 */
export function streamTransport(
  baseUrl: string,
  nodeOptions: SecureClientSessionOptions | undefined,
  interceptors: Interceptor[],
): { transport: Transport; release: () => void } {
  const tls = baseUrl.startsWith("https:");
  const manager = new Http2SessionManager(
    baseUrl,
    { pingIntervalMs: 30_000, pingTimeoutMs: 15_000 },
    {
      ...(nodeOptions ?? {}),
      createConnection: (authority: URL): Duplex => {
        let host = authority.hostname || "localhost";
        if (host.startsWith("[")) host = host.slice(1, -1);
        const port = Number(authority.port || (tls ? 443 : 80));
        const socket = tls
          ? tlsConnect({
              ...(nodeOptions ?? {}),
              host,
              port,
              ALPNProtocols: ["h2"],
              ...(isIP(host) ? {} : { servername: host }),
            })
          : netConnect({ host, port });
        socket.unref();
        return socket;
      },
    },
  );
  // The session manager refs the connection while a stream is open; undo it.
  const unrefSessions = {
    authority: manager.authority,
    async request(
      method: string,
      path: string,
      headers: OutgoingHttpHeaders,
      options: Parameters<Http2SessionManager["request"]>[3],
    ): Promise<ClientHttp2Stream> {
      const stream = await manager.request(method, path, headers, options);
      stream.session?.unref();
      return stream;
    },
    notifyResponseByteRead: (stream: ClientHttp2Stream) => manager.notifyResponseByteRead(stream),
  };
  const transport = createGrpcTransport({ baseUrl, sessionManager: unrefSessions, interceptors });
  return { transport, release: () => manager.abort() };
}
