"""The shared client vectors (clients/testdata, docs/clients.md); the Go and
TypeScript suites read the same files."""

from __future__ import annotations

import asyncio
import errno
import json
import socket
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from policyd_client import (
    Cause,
    Client,
    FailOpenPolicy,
    Failure,
    failure_from_exception,
    failure_from_response,
    retry_after,
)
from policyd_client._core import Address, caller_mistake, default_agent, parse_addr
from policyd_client.fail_open import derive_safety

TESTDATA = Path(__file__).resolve().parents[2] / "testdata"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((TESTDATA / name).read_text())
    assert data["cases"], name
    return data


def ids(name: str) -> list[Any]:
    return [pytest.param(c, id=c["id"]) for c in load(name)["cases"]]


def epoch(name: str) -> float:
    return datetime.fromisoformat(load(name)["now"].replace("Z", "+00:00")).timestamp()


@pytest.mark.parametrize("case", ids("retry_after.json"))
def test_retry_after(case: dict[str, Any]) -> None:
    now = epoch("retry_after.json")
    got = retry_after(case["headers"], lambda: now)
    if case["want_ms"] is None:
        assert got is None
    else:
        assert got is not None and abs(got * 1000 - case["want_ms"]) <= 1


@pytest.mark.parametrize("case", ids("safety.json"))
def test_safety(case: dict[str, Any]) -> None:
    assert derive_safety(case["operation"], case["method"]) == case["want"]


def check_fail_open(
    f: Failure,
    want: dict[str, Any],
    now: float,
    attempt: int = 1,
    safety: str | None = None,
    deadline_ms: float | None = None,
) -> None:
    """Decide at jitter draws 0 and just under 1; check the outcome and the delay bounds."""
    for r, bound in ((0.0, "min"), (1 - 1e-9, "max")):
        policy = FailOpenPolicy(random=lambda: r, now=lambda: now)  # noqa: B023 - used before r changes
        remaining = None if deadline_ms is None else deadline_ms / 1000
        d = policy.decide(f, attempt, remaining=remaining, safety=safety)
        assert (d.action.value.lower(), d.failure_type) == (want["action"], want["failure_type"]), d
        if "retryable" in want:
            assert d.retryable == want["retryable"]
        if "stop_reason" in want:
            assert d.stop_reason == want["stop_reason"]
        if "attempts_left" in want:
            assert d.attempts_left == want["attempts_left"]
        if "delay_ms" in want:
            assert abs(d.delay * 1000 - want["delay_ms"][bound]) <= 1, (r, d.delay)


def to_failure(v: dict[str, Any]) -> Failure:
    return Failure(
        http_status=v.get("http_status", 0),
        headers=v.get("headers", {}),
        error_code=v.get("error_code", ""),
        causes=[Cause(name=c["name"], code=c["code"]) for c in v.get("causes", [])],
        grpc_code=v.get("grpc_code", 0),
        operation=v.get("operation", ""),
        method=v.get("method", ""),
    )


@pytest.mark.parametrize("case", ids("fail_open.json"))
def test_fail_open(case: dict[str, Any]) -> None:
    check_fail_open(
        to_failure(case["failure"]),
        case["want"],
        epoch("fail_open.json"),
        attempt=case["attempt"],
        safety=case.get("safety"),
        deadline_ms=case.get("deadline_ms"),
    )


class _RpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return "upstream"


def native(n: dict[str, Any]) -> Failure:
    """Map the Python native a language-neutral description stands for."""
    kind = n["kind"]
    if kind == "http_response":
        response = SimpleNamespace(
            status_code=n["status"],
            headers=[tuple(p) for p in n["headers"]],
            text=n["body"],
            request=SimpleNamespace(method=n["method"]),
        )
        return failure_from_response(response)
    if kind == "errno":
        code = getattr(errno, n["code"])
        return failure_from_exception(OSError(code, "connection failed"))
    if kind == "timeout":
        return failure_from_exception(TimeoutError("timed out"))
    if kind == "dns_not_found":
        return failure_from_exception(socket.gaierror(socket.EAI_NONAME, "Name or service not known"))
    if kind == "canceled":
        return failure_from_exception(asyncio.CancelledError())
    if kind == "grpc_status":
        code = next(c for c in grpc.StatusCode if c.value[0] == n["code"])
        return failure_from_exception(_RpcError(code))
    raise AssertionError(f"unknown native kind {kind}")


@pytest.mark.parametrize("case", ids("error_mapping.json"))
def test_error_mapping(case: dict[str, Any]) -> None:
    f = native(case["native"])
    for key, want in case["want"]["failure"].items():
        if key == "headers":
            assert {k: f.headers[k] for k in want} == want
        else:
            assert getattr(f, key) == want, key
    check_fail_open(f, case["want"]["fail_open"], datetime(2026, 1, 1).timestamp())


@pytest.mark.parametrize("case", [pytest.param(c, id=c["addr"]) for c in load("address.json")["cases"]])
def test_address(case: dict[str, Any]) -> None:
    if case.get("error"):
        with pytest.raises(ValueError):
            parse_addr(case["addr"])
    else:
        assert parse_addr(case["addr"]) == Address(case["target"], case["tls"])


def test_a_bad_policyd_addr_is_an_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLICYD_ADDR", "grpc://127.0.0.1:7433")
    with pytest.raises(ValueError, match="POLICYD_ADDR.*scheme"):
        Client()


@pytest.mark.parametrize("case", [pytest.param(c, id=c["program"]) for c in load("agent.json")["cases"]])
def test_default_agent(case: dict[str, Any]) -> None:
    assert default_agent(case["program"]) == case["agent"]


@pytest.mark.parametrize(
    "case", [pytest.param(c, id=f"{c['code']}:{c['message']}") for c in load("refusals.json")["cases"]]
)
def test_refusals(case: dict[str, Any]) -> None:
    assert caller_mistake(case["code"], case["message"]) is case["raise"]
