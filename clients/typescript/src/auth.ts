// Bearer tokens and TLS for a daemon started with --auth-tokens or
// --tls-cert, and the error a refused token is.

import { readFileSync } from "node:fs";
import type { SecureClientSessionOptions } from "node:http2";
import { isIP } from "node:net";
import type { ConnectError, Interceptor } from "@connectrpc/connect";

/** The environment variables read when the matching option is unset. */
export const ENV_TOKEN = "POLICYD_TOKEN";
export const ENV_TLS_CA = "POLICYD_TLS_CA";
export const ENV_TLS_CERT = "POLICYD_TLS_CERT";
export const ENV_TLS_KEY = "POLICYD_TLS_KEY";

/** @internal The options of createClient this file reads. */
export interface SecurityOptions {
  token?: string | undefined;
  tls?: boolean | undefined;
  tlsCaFile?: string | undefined;
  tlsCertFile?: string | undefined;
  tlsKeyFile?: string | undefined;
}

/** @internal How the client reaches the daemon. */
export interface Security {
  baseUrl: string;
  token: string;
  nodeOptions?: SecureClientSessionOptions;
}

/** Whether host is this machine: a loopback IP or localhost. */
export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase();
  if (h === "localhost") return true;
  if (isIP(h) === 4) return h.startsWith("127.");
  if (isIP(h) === 6) return h === "::1" || h === "0:0:0:0:0:0:0:1";
  return false;
}

function read(path: string, what: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    throw new Error(`policyd: cannot read the TLS ${what} ${path}: ${(err as Error).message}`, { cause: err });
  }
}

/**
 * @internal resolveSecurity fills what the options leave unset from the
 * environment and reads the TLS files. It throws for a file that cannot be
 * read, a certificate without its key, or a token that would go in
 * plaintext to an address beyond loopback.
 */
export function resolveSecurity(address: string, o: SecurityOptions): Security {
  const env = process.env;
  const token = o.token ?? env[ENV_TOKEN] ?? "";
  const ca = o.tlsCaFile ?? (env[ENV_TLS_CA] || undefined);
  let cert = o.tlsCertFile;
  let key = o.tlsKeyFile;
  if (cert === undefined && key === undefined) {
    cert = env[ENV_TLS_CERT] || undefined;
    key = env[ENV_TLS_KEY] || undefined;
  }
  const scheme = /^https:\/\//.test(address) ? "https" : /^http:\/\//.test(address) ? "http" : "";
  const hostPort = address.replace(/^https?:\/\//, "").replace(/\/+$/, "");
  const tls = o.tls ?? (scheme === "https" || Boolean(ca || cert || key));
  if (!tls) {
    const host = hostPort.replace(/:\d+$/, "");
    if (token && !isLoopbackHost(host)) {
      throw new Error(
        `policyd: not sending the bearer token (${ENV_TOKEN}) in plaintext to ${hostPort}, which is not a loopback address: ` +
          `use TLS (tls: true, tlsCaFile or ${ENV_TLS_CA})`,
      );
    }
    return { baseUrl: `http://${hostPort}`, token };
  }
  if (Boolean(cert) !== Boolean(key)) {
    throw new Error(
      `policyd: a TLS client certificate needs both the certificate and the key (${ENV_TLS_CERT}, ${ENV_TLS_KEY})`,
    );
  }
  const nodeOptions: SecureClientSessionOptions = { minVersion: "TLSv1.2" };
  if (ca) nodeOptions.ca = read(ca, "CA file");
  if (cert) nodeOptions.cert = read(cert, "client certificate");
  if (key) nodeOptions.key = read(key, "client key");
  return { baseUrl: `https://${hostPort}`, token, nodeOptions };
}

/** @internal bearerInterceptor sends `authorization: Bearer TOKEN` with every call. */
export function bearerInterceptor(token: string): Interceptor {
  const value = `Bearer ${token}`;
  return (next) => async (req) => {
    req.header.set("authorization", value);
    return next(req);
  };
}

/**
 * PolicydAuthError: the daemon answered UNAUTHENTICATED — no token, an
 * unknown one, or no valid client certificate. A configuration error, not
 * an outage, so the client does not fail open on it: call rejects with it
 * after the attempt that failed (`error`), and so does classify. Its
 * `cause` is the daemon's ConnectError; nothing in it contains the token.
 */
export class PolicydAuthError extends Error {
  override name = "PolicydAuthError";
  declare readonly cause: ConnectError;
  /** The daemon's address. */
  readonly address: string;
  /** The RPC the daemon refused, e.g. "NextDelay". */
  readonly method: string;
  /** Whether the client sent a token. */
  readonly tokenSet: boolean;
  /** The failed attempt's error, when a call was running; undefined for classify. */
  error: unknown;

  constructor(address: string, method: string, cause: ConnectError, tokenSet: boolean) {
    const hint = tokenSet
      ? `the token sent (${ENV_TOKEN} or the token option) is not in the daemon's --auth-tokens file`
      : `set ${ENV_TOKEN} (or the token option) to a token of the daemon's --auth-tokens file`;
    super(`policyd at ${address} refused ${method}: UNAUTHENTICATED: ${cause.rawMessage}; ${hint}`, { cause });
    this.address = address;
    this.method = method;
    this.tokenSet = tokenSet;
  }
}

/**
 * PolicydOptionsError: the daemon answered INVALID_ARGUMENT to a call's own
 * options — an unknown profile, a contextId that is not a UUID, too many
 * labels. Like PolicydAuthError a configuration error, not an outage, so the
 * client does not fail open on it (which would hide it behind retries that
 * look fine and a journal that stays empty): call rejects with it after the
 * attempt that failed (`error`), and so does classify. Its message is the
 * daemon's, naming the field; its `cause` the daemon's ConnectError.
 */
export class PolicydOptionsError extends Error {
  override name = "PolicydOptionsError";
  declare readonly cause: ConnectError;
  /** The daemon's address. */
  readonly address: string;
  /** The RPC the daemon refused, e.g. "NextDelay". */
  readonly method: string;
  /** The failed attempt's error, when a call was running; undefined for classify. */
  error: unknown;

  constructor(address: string, method: string, cause: ConnectError) {
    super(`policyd at ${address} refused ${method}: INVALID_ARGUMENT: ${cause.rawMessage}`, { cause });
    this.address = address;
    this.method = method;
  }
}
