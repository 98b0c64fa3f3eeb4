"""The fleet gate's shared vectors (clients/testdata/gate.json, docs/clients.md "The fleet gate");
internal/refgate/gate_vectors_test.go and the Go and TypeScript suites replay the same file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from policyd_client._fleet import Target
from policyd_client._gate import Fallback, Gate, GateAssignment, Parked
from policyd_client._texts import budget_text, gate_decision

TESTDATA = Path(__file__).resolve().parents[2] / "testdata"
VECTORS: dict[str, Any] = json.loads((TESTDATA / "gate.json").read_text())
CASES: list[dict[str, Any]] = VECTORS["cases"]
TARGET = Target(VECTORS["target"]["provider"], VECTORS["target"]["model"], VECTORS["target"]["key_id"])


def fallback(f: dict[str, Any] | None) -> Fallback | None:
    if f is None:
        return None
    return Fallback(kind=f["kind"], provider=f["provider"], model=f["model"], reason=f["reason"])


def test_the_cases_are_there() -> None:
    assert len(CASES) >= 30
    assert len({c["id"] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", [pytest.param(c, id=c["id"]) for c in CASES])
def test_gate_vector(case: dict[str, Any]) -> None:
    if case.get("requires") not in (None, "park", "classes", "lease", "grants"):
        pytest.skip(f"requires {case['requires']}")
    g = Gate(target=str(TARGET))
    parked: dict[str, Parked] = {}
    for i, step in enumerate(case["steps"]):
        now = step["at_ms"] / 1000
        where = f"step {i} at {step['at_ms']}ms"
        if "assign" in step:
            a = step["assign"]
            assert a["breaker"] in ("CLOSED", "OPEN", "HALF_OPEN"), where
            g.assign(
                now,
                GateAssignment(
                    ttl=a["ttl_ms"] / 1000,
                    breaker=a["breaker"],
                    hold=a["hold_ms"] / 1000,
                    stop=a["stop_ms"] / 1000,
                    admit_fraction=a["admit_fraction"],
                    probe_permits=a["probe_permits"],
                    reason=a["reason"],
                    fallback=fallback(a["fallback"]),
                    park_hint=a.get("park_hint_ms", 0) / 1000,
                    batch_admit_fraction=a.get("batch_admit_fraction"),
                    in_flight_lease=a.get("in_flight_lease"),
                    pace_permits=a.get("pace_permits"),
                ),
            )
        elif step.get("abandon"):
            g.assign(now, None)
        elif "outcome" in step:
            assert step["outcome"] in ("success", "failure"), where
            g.record(now, step["outcome"] == "success")
        elif "retry" in step:
            want = step["want"]
            assert g.allow_retry(now) == (want["action"] == "admit"), where
            if want["action"] == "stop":
                assert budget_text(TARGET) == want["text"], where
        elif "gate" in step or "resume" in step:
            want = step["want"]
            g.in_flight = step.get("gate", step.get("resume", {})).get("in_flight", 0)
            if "gate" in step:
                gate = step["gate"]
                deadline = gate.get("deadline_ms")
                limit = gate.get("max_park_ms")
                got = g.check(
                    now,
                    None if deadline is None else deadline / 1000,
                    gate["can_fall_back"],
                    gate["draw"],
                    None if limit is None else limit / 1000,
                    batch=gate.get("class", "interactive") == "batch",
                )
                if got.parked is not None:
                    parked[gate.get("call", "")] = got.parked
            else:
                got = g.resume(now, parked[step["resume"]["call"]], step["resume"]["draw"])
            assert got.action.value == want["action"], where
            assert got.wait * 1000 == pytest.approx(want.get("wait_ms", 0), abs=1e-6), where
            assert got.probe == want.get("probe", False), where
            if "waited_ms" in want:
                assert got.waited * 1000 == pytest.approx(want["waited_ms"], abs=1e-6), where
            if want.get("reason"):
                assert got.reason == want["reason"], where
            if want["action"] == "park":
                assert got.stop_reason == want["stop_reason"], where
            if want["action"] in ("stop", "fall_back"):
                assert got.stop_reason == want["stop_reason"], where
                # What the caller sees: the decision the call's error carries.
                d = gate_decision(TARGET, got)
                assert d.stop_text == want["text"], where
                f, wf = d.fleet, want["fleet"]
                assert f is not None, where
                assert (f.breaker, f.stopped, f.reason) == (wf["breaker"], wf["stopped"], wf["reason"]), where
                assert f.hold_remaining * 1000 == pytest.approx(wf["hold_remaining_ms"], abs=1e-6), where
                assert f.open_remaining * 1000 == pytest.approx(wf["open_remaining_ms"], abs=1e-6), where
            if want["action"] == "fall_back":
                assert got.fallback == fallback(want["fallback"]), where
        else:
            pytest.fail(f"{where} does nothing")
    if case.get("counts") is not None:
        counts = case["counts"]
        assert (g.admitted, g.shed, g.parks) == (counts["admitted"], counts["shed"], counts.get("parked", 0))
        assert g.batch_first == counts.get("batch_first_attempts", 0)
        assert g.fell_back == counts.get("fell_back", 0)
