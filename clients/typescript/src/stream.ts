// The fleet stream's I/O (docs/clients.md, "The fleet gate"): its own
// HTTP/2 transport, and the waits that never keep Node running. The
// coordinator (coordinate.ts) runs the stream over them; the table and the
// gate's checks are coordinate.ts's and gate.ts's, the texts texts.ts's.

import type { ClientHttp2Stream, OutgoingHttpHeaders, SecureClientSessionOptions } from "node:http2";
import { isIP, connect as netConnect } from "node:net";
import type { Duplex } from "node:stream";
import { connect as tlsConnect } from "node:tls";
import type { Interceptor, Transport } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";

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
