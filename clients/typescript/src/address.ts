// The one daemon address grammar every client accepts (docs/clients.md,
// "The daemon address"), and the default agent name, which every client
// derives the same way (clients/testdata/address.json, agent.json).

import { isIPv6 } from "node:net";

/** The port of an address that names none: policyd's own, not HTTP's 80 or 443. */
export const DEFAULT_PORT = 7433;

/** A parsed daemon address: the host:port to dial, and whether its scheme asked for TLS. */
export interface Address {
  target: string;
  tls: boolean;
}

/**
 * parseAddress reads `[http:// | https://] host [:port] [/]`: host a name,
 * an IPv4 address or a bracketed IPv6 address; port DEFAULT_PORT when none
 * is given; http:// is plaintext, as no scheme is, and https:// turns TLS
 * on. Anything else throws an Error naming what is wrong, so that a typo
 * fails when the client is made rather than looking like an outage.
 */
export function parseAddress(addr: string): Address {
  let rest = addr.trim();
  let tls = false;
  const sep = rest.indexOf("://");
  if (sep >= 0) {
    const scheme = rest.slice(0, sep);
    const s = scheme.toLowerCase();
    if (s !== "http" && s !== "https") {
      throw new Error(`address "${addr}": scheme "${scheme}": want http:// or https:// (or none)`);
    }
    tls = s === "https";
    rest = rest.slice(sep + 3);
  }
  if (rest.endsWith("/")) rest = rest.slice(0, -1);
  if (/[/?# \t]/.test(rest)) throw new Error(`address "${addr}": want [http://|https://]host[:port], without a path`);
  let host = rest;
  let port = "";
  if (rest.startsWith("[")) {
    const end = rest.indexOf("]");
    if (end < 0) throw new Error(`address "${addr}": unclosed [ in an IPv6 address`);
    host = rest.slice(1, end);
    const tail = rest.slice(end + 1);
    if (tail) {
      if (!tail.startsWith(":")) throw new Error(`address "${addr}": want [IPv6]:port`);
      port = tail.slice(1);
      if (!port) throw new Error(`address "${addr}": empty port`);
    }
    if (!isIPv6(host)) throw new Error(`address "${addr}": "${host}" is not an IPv6 address`);
    host = `[${host}]`;
  } else if (rest.split(":").length > 2) {
    throw new Error(`address "${addr}": too many colons (write an IPv6 address in brackets: [::1]:${DEFAULT_PORT})`);
  } else if (rest.includes(":")) {
    [host, port] = rest.split(":") as [string, string];
    if (!port) throw new Error(`address "${addr}": empty port`);
  }
  if (!host) throw new Error(`address "${addr}": no host`);
  let n = DEFAULT_PORT;
  if (port) {
    n = /^[0-9]+$/.test(port) ? Number(port) : NaN;
    if (!(n >= 1 && n <= 65535)) throw new Error(`address "${addr}": port "${port}": want a number in 1..65535`);
  }
  return { target: `${host}:${n}`, tls };
}

/**
 * defaultAgent is the agent a journaled context names when the caller
 * gives none, the same in every client: the program's file name without
 * its extension ("/usr/bin/fetcher" and "fetcher.js" are both "fetcher"),
 * or the package's name for a __main__ file. The journal's views group by
 * agent, so a Go binary, a Python script and a Node script of the same
 * name land in one row.
 */
export function defaultAgent(program: string): string {
  const parts = program.replaceAll("\\", "/").split("/");
  let base = parts[parts.length - 1] ?? "";
  const dot = base.lastIndexOf(".");
  if (dot > 0) base = base.slice(0, dot);
  if (base === "__main__") {
    const parent = parts
      .slice(0, -1)
      .reverse()
      .find((p) => p && p !== ".");
    if (parent) base = parent;
  }
  return base;
}
