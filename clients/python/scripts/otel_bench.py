"""What OpenTelemetry costs a call's success path (no RPC): nanoseconds a ``Client.call`` whose
function succeeds at once, with OpenTelemetry not importable (``none``), with its API and no SDK
(``api``), and inside a recording span of the SDK's (``sdk``); each mode in a process of its own,
rounds alternating. ``--baseline DIR`` times the package in DIR (e.g. an older checkout's
``src``) in the same rounds, so that before and after are measured side by side.

    .venv/bin/python scripts/otel_bench.py [--rounds 9] [--calls 100000] [--baseline DIR]

Prints one line a tree and mode: the median of the rounds, and their spread (min to max); with
a baseline, then the median over the rounds of this tree's time over the baseline's, a mode at a
time (a ratio of timings taken moments apart, steadier than either on a busy machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

MODES = ("none", "api", "sdk")

# One timing in a fresh process: argv is the mode and the number of calls; prints ns a call.
CHILD = """
import sys, time
mode, n = sys.argv[1], int(sys.argv[2])
if mode == "none":
    sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
from policyd_client import Client
span = None
if mode == "sdk":
    from opentelemetry.sdk.trace import TracerProvider
    span = TracerProvider().get_tracer("bench").start_as_current_span("bench")
    span.__enter__()
c = Client("127.0.0.1:9", fleet_gate=False)  # nothing listens: a success makes no RPC anyway
ok = lambda: 1
for _ in range(n // 10):  # warm up
    c.call(ok)
start = time.perf_counter_ns()
for _ in range(n):
    c.call(ok)
print((time.perf_counter_ns() - start) / n)
"""


def time_once(src: Path, mode: str, calls: int) -> float:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")]))
    env = {k: v for k, v in env.items() if not k.startswith("OTEL_")}
    out = subprocess.run([sys.executable, "-c", CHILD, mode, str(calls)], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"otel_bench: {mode} in {src} failed:\n{out.stderr}")
    return float(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9, help="rounds, each timing every tree and mode once")
    ap.add_argument("--calls", type=int, default=100_000, help="calls a timing")
    ap.add_argument("--baseline", type=Path, help="another tree's src to time alongside this one")
    args = ap.parse_args()
    trees = {"this": Path(__file__).resolve().parents[1] / "src"}
    if args.baseline is not None:
        trees["baseline"] = args.baseline.resolve()
    times: dict[tuple[str, str], list[float]] = {(t, m): [] for t in trees for m in MODES}
    for _ in range(args.rounds):
        for mode in MODES:  # a mode's trees one after the other: the ratio compares neighbours
            for tree, src in trees.items():
                times[tree, mode].append(time_once(src, mode, args.calls))
    for (tree, mode), ns in times.items():
        print(f"{tree:8} {mode:4}  {statistics.median(ns):7.0f} ns/call  ({min(ns):.0f}-{max(ns):.0f})")
    if args.baseline is not None:
        for mode in MODES:
            ratios = [a / b for a, b in zip(times["this", mode], times["baseline", mode], strict=True)]
            print(f"this/baseline {mode:4}  {statistics.median(ratios):.3f}  ({min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
