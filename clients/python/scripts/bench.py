"""The transport's cost: requests a second through it against requests a second through the bare
httpx2 transport, to the same local fake provider (no limits), alternating in one run.

Run by scripts/bench.sh; prints ``transport/bare=R (transport T req/s, bare B req/s)``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2

from policyd_client import Client

BODY = {"model": "gpt-bench", "max_tokens": 1, "messages": [{"role": "user", "content": "Say hi"}]}


def start(cmd: list[str], pattern: str) -> tuple[subprocess.Popen[str], str]:
    """Start cmd; return it and the first match of pattern in its output (stdout, then stderr)."""
    log = tempfile.NamedTemporaryFile("w+", prefix="policyd-bench-", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd, stdout=log, stderr=log, text=True)
    end = time.monotonic() + 30
    while time.monotonic() < end:
        m = re.search(pattern, Path(log.name).read_text())
        if m:
            return proc, m.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    proc.kill()
    raise SystemExit(f"bench: {cmd[0]} did not start:\n{Path(log.name).read_text()}")


def run(client: httpx2.Client, n: int) -> tuple[float, float]:
    """Send n requests one after the other: their wall time and this process's CPU time, seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        r = client.post("/v1/chat/completions", json=BODY, headers={"authorization": "Bearer sk-bench"})
        if r.status_code != 200:
            raise SystemExit(f"bench: HTTP {r.status_code}: {r.text}")
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=50, help="requests a round and mode")
    ap.add_argument("--rounds", type=int, default=60, help="rounds, alternating the modes")
    args = ap.parse_args()
    repo = Path(__file__).resolve().parents[3]
    policyd = os.environ.get("POLICYD_BIN") or str(repo / "bin" / "policyd")
    fake = os.environ.get("FAKEPROVIDER_BIN") or str(repo / "bin" / "policyd-fakeprovider")
    provider, url = start([fake], r"listening on (http://\S+)")
    daemon, addr = start([policyd, "serve", "--listen", "127.0.0.1:0", "--fleet", "on"], r"msg=serving addr=(\S+)")
    try:
        with Client(addr) as pd:
            bare = httpx2.Client(base_url=url, transport=httpx2.HTTPTransport())
            through = httpx2.Client(base_url=url, transport=pd.httpx2_client(provider="openai")._transport)
            for c in (bare, through):  # warm up: connections, and the target's first assignment
                run(c, 50)
            spent = {"bare": [0.0, 0.0], "transport": [0.0, 0.0]}
            for _ in range(args.rounds):  # alternating, so that both see the same machine
                for name, c in (("bare", bare), ("transport", through)):
                    wall, cpu = run(c, args.requests)
                    spent[name][0] += wall
                    spent[name][1] += cpu
            n = args.rounds * args.requests
            b, t = n / spent["bare"][0], n / spent["transport"][0]
            print(f"transport/bare={t / b:.2f} (transport {t:.0f} req/s, bare {b:.0f} req/s)")
            # The client's own CPU for each request: what the transport adds, less the machine's noise.
            cb, ct = (spent[k][1] / n * 1e6 for k in ("bare", "transport"))
            print(f"client CPU per request: transport {ct:.0f} us, bare {cb:.0f} us (+{ct - cb:.0f} us)")
    finally:
        for p in (daemon, provider):
            p.terminate()
            p.wait(10)


if __name__ == "__main__":
    sys.exit(main())
