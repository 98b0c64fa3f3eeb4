"""What the transport adds to a request, in process: microseconds a request through an
``httpx2.Client`` whose transport is the policyd transport (its fleet gate on, an assignment from
a real policyd) over an in-memory inner transport that answers at once with the fake provider's
chat completion, against the same client over the bare in-memory transport. No socket, so what
is left is the client's own work; scripts/bench.sh measures the same over a real connection.

    .venv/bin/python scripts/transport_bench.py [--rounds 3] [--pairs 30] [--requests 300] [--baseline DIR]

Each timing is a process of its own that alternates bare and transport runs (``--pairs`` of
``--requests`` each) and takes the medians of their CPU time a request; rounds alternate the trees.
Prints the median over the rounds of the bare request's, the transport's and their difference.
``--baseline DIR`` times the package in DIR (e.g. an older checkout's ``src``) in the same rounds,
so that before and after are measured side by side.
Assumes bin/policyd is built (make build), or POLICYD_BIN.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import BODY, start  # noqa: E402  (the same request body as the socket benchmark)

# One timing in a fresh process: argv is the daemon's address, the pairs of runs, the requests a
# run and the request's body; prints the medians of the CPU µs a request: bare, through the
# transport, and their difference in a pair. The reply is the fake provider's chat completion.
CHILD = """
import json, statistics, sys, time
import httpx2
from policyd_client import Client
addr, pairs, n, body = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
REPLY = (b'{"choices":[{"finish_reason":"stop","index":0,"message":{"content":"ok! ","role":"assistant"}}],'
         b'"created":1795800692,"id":"chatcmpl-fake","model":"gpt-bench","object":"chat.completion",'
         b'"usage":{"completion_tokens":1,"prompt_tokens":2,"total_tokens":3}}')
class Reply(httpx2.SyncByteStream):  # a body read as it comes, as a connection's is
    def __iter__(self):
        yield REPLY
def answer(request):
    headers = {"content-type": "application/json", "content-length": str(len(REPLY))}
    return httpx2.Response(200, headers=headers, stream=Reply())
def run(c, n):
    start = time.process_time()
    for _ in range(n):
        r = c.post("/v1/chat/completions", json=body, headers={"authorization": "Bearer sk-bench"})
        assert r.status_code == 200
    return (time.process_time() - start) / n * 1e6
with Client(addr) as pd:
    url = "http://fake.invalid"
    bare = httpx2.Client(base_url=url, transport=httpx2.MockTransport(answer))
    inner = httpx2.MockTransport(answer)
    through = httpx2.Client(base_url=url, transport=pd.httpx2_client(provider="openai", inner=inner)._transport)
    run(bare, n); run(through, n)  # warm up, and the target's first assignment
    time.sleep(1.2)  # the assignment after the first report
    pairs = [(run(bare, n), run(through, n)) for _ in range(pairs)]
    print(statistics.median(b for b, _ in pairs), statistics.median(t for _, t in pairs),
          statistics.median(t - b for b, t in pairs))
"""


def time_once(src: Path, addr: str, pairs: int, requests: int) -> tuple[float, float, float]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")]))
    args = [sys.executable, "-c", CHILD, addr, str(pairs), str(requests), json.dumps(BODY)]
    out = subprocess.run(args, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"transport_bench: {src} failed:\n{out.stderr}")
    bare, through, added = out.stdout.split()
    return float(bare), float(through), float(added)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3, help="rounds, each timing every tree once")
    ap.add_argument("--pairs", type=int, default=30, help="pairs of bare and transport runs a timing")
    ap.add_argument("--requests", type=int, default=300, help="requests a run")
    ap.add_argument("--baseline", type=Path, help="another tree's src to time alongside this one")
    args = ap.parse_args()
    repo = Path(__file__).resolve().parents[3]
    policyd = os.environ.get("POLICYD_BIN") or str(repo / "bin" / "policyd")
    daemon, addr = start([policyd, "serve", "--listen", "127.0.0.1:0", "--fleet", "on"], r"msg=serving addr=(\S+)")
    trees = {"this": Path(__file__).resolve().parents[1] / "src"}
    if args.baseline is not None:
        trees["baseline"] = args.baseline.resolve()
    try:
        times: dict[str, list[tuple[float, float, float]]] = {t: [] for t in trees}
        for _ in range(args.rounds):
            for tree, src in trees.items():
                times[tree].append(time_once(src, addr, args.pairs, args.requests))
    finally:
        daemon.terminate()
        daemon.wait(10)
    for tree, ts in times.items():
        bare, through, added = (statistics.median(t[i] for t in ts) for i in range(3))
        print(f"{tree:8} CPU a request: bare {bare:5.1f} us, transport {through:5.1f} us (+{added:.1f} us)")


if __name__ == "__main__":
    main()
