// The processes the benchmarks run against (bench.ts, transport_bench.ts),
// started from the built binaries the environment names. Not the tests'
// harness.ts: that one registers node:test hooks, which would make a
// benchmark a test run.

import { type ChildProcess, spawn } from "node:child_process";
import { createInterface } from "node:readline";

/** Starts bin, and resolves found with what pick finds in its first lines of out. */
export function start(
  bin: string,
  args: string[],
  out: "stdout" | "stderr",
  pick: (line: string) => string | undefined,
) {
  const child: ChildProcess = spawn(bin, args, { stdio: ["ignore", out === "stdout" ? "pipe" : "ignore", "pipe"] });
  const found = new Promise<string>((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`${bin} exited (${code})`)));
    createInterface({ input: child[out]! }).on("line", (line) => {
      const v = pick(line);
      if (v) resolve(v);
    });
  });
  return { child, found };
}

/** The environment variable name, which must be set. */
export function need(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`bench: set ${name}`);
  return v;
}

/** policyd (POLICYD_BIN) serving on a free loopback port with fleet memory on; found is its address. */
export function startPolicyd() {
  return start(
    need("POLICYD_BIN"),
    ["serve", "--listen", "127.0.0.1:0", "--log-format", "json", "--fleet", "on"],
    "stderr",
    (line) => {
      try {
        const rec = JSON.parse(line) as { msg?: string; addr?: string };
        return rec.msg === "serving" ? rec.addr : undefined;
      } catch {
        return undefined;
      }
    },
  );
}
