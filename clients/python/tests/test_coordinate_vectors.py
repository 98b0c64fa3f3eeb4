"""clients/testdata/coordinate.json: scripts of calls, outcomes and clock steps on one client's
table, and the reports the stream sends; the Go and TypeScript clients replay the same file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from policyd_client import policy_pb2
from policyd_client._fleet import FleetTable, GateCall, Target
from policyd_client._gen.policyd.v1 import fleet_pb2 as fpb

VECTORS: dict[str, Any] = json.loads((Path(__file__).resolve().parents[2] / "testdata" / "coordinate.json").read_text())
T = Target(VECTORS["target"]["provider"], VECTORS["target"]["model"], VECTORS["target"]["key_id"])


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("case", [pytest.param(c, id=c["id"]) for c in VECTORS["cases"]])
def test_coordinate_vector(case: dict[str, Any]) -> None:
    clock = Clock()
    table = FleetTable(clock)
    for i, step in enumerate(case["steps"]):
        clock.now = step["at_ms"] / 1000
        where = f"step {i} at {step['at_ms']}ms"
        if "first_attempt" in step:
            fa = step["first_attempt"]
            call = GateCall(input_tokens=fa.get("input_tokens", 0))
            table.check(T, None, fa.get("can_fall_back", False), fa["draw"], 0, call)
        elif "outcome" in step:
            table.record(T, step["outcome"] == "success")
            if (usage := step.get("usage")) is not None:
                table.record_usage(T, usage.get("input_tokens_used", 0), usage.get("estimated", 0))
                if usage.get("output_tokens_used", 0) > 0:
                    table.record_output(T, usage["output_tokens_used"])
        elif step.get("failed_locally"):
            table.failed_locally(T)
        elif step.get("retry"):
            table.retried(T)
        elif "observe" in step:
            table.observe(T, step["observe"])
        elif "assign" in step:
            a = step["assign"]
            pa = fpb.Assignment(
                target=fpb.BucketTarget(provider=T.provider, model=T.model, key_id=T.key_id),
                breaker=policy_pb2.BreakerState.Value("BREAKER_STATE_" + a["breaker"]),
                admit_fraction=a["admit_fraction"],
                probe_permits=a["probe_permits"],
                reason=a["reason"],
            )
            pa.ttl.FromMilliseconds(a["ttl_ms"])
            pa.hold.FromMilliseconds(a["hold_ms"])
            pa.stop.FromMilliseconds(a["stop_ms"])
            if (fb := a.get("fallback")) is not None:
                pa.fallback.CopyFrom(
                    policy_pb2.Fallback(
                        kind=policy_pb2.FallbackKind.Value("FALLBACK_KIND_" + fb["kind"]),
                        provider=fb["provider"],
                        model=fb["model"],
                        reason=fb["reason"],
                    )
                )
            table.apply(fpb.CoordinateResponse(assignments=[pa]))
        elif "report" in step:
            got = [u for m in table.reports() for u in m.usage]
            want = step["report"]
            assert len(got) == len(want), where
            for u, w in zip(got, want, strict=True):
                assert u.elapsed.ToMilliseconds() == w["elapsed_ms"], where
                assert (u.admitted, u.shed, u.fell_back, u.succeeded, u.failed, u.retries) == (
                    w["admitted"],
                    w["shed"],
                    w["fell_back"],
                    w["succeeded"],
                    w["failed"],
                    w["retries"],
                ), where
                assert dict(u.rate_limit_headers) == w["rate_limit_headers"], where
                assert (u.first_attempt_input_tokens, u.input_tokens_used, u.input_tokens_estimated_for_used) == (
                    w.get("first_attempt_input_tokens", 0),
                    w.get("input_tokens_used", 0),
                    w.get("input_tokens_estimated_for_used", 0),
                ), where
                assert (u.output_tokens_used, u.output_tokens_used_calls) == (
                    w.get("output_tokens_used", 0),
                    w.get("output_tokens_used_calls", 0),
                ), where
        else:
            pytest.fail(f"{where} does nothing")
