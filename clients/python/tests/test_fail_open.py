"""The fail-open policy, deterministic through its injected random source and clock."""

from __future__ import annotations

import email.utils

import pytest

from policyd_client import (
    SOURCE_FAIL_OPEN,
    Action,
    Cause,
    FailOpenPolicy,
    Failure,
    failure_from_exception,
    retry_after,
)

NOW = 1_800_000_000.0


def policy(r: float = 0.5, **kw: float) -> FailOpenPolicy:
    return FailOpenPolicy(random=lambda: r, now=lambda: NOW, **kw)  # type: ignore[arg-type]


def http(status: int, **headers: str) -> Failure:
    return Failure(http_status=status, headers={k.replace("_", "-"): v for k, v in headers.items()})


@pytest.mark.parametrize(
    "failure, failure_type",
    [
        (http(429), "RATE_LIMIT"),
        (http(500), "SERVER_ERROR"),
        (http(502), "SERVER_ERROR"),
        (http(503), "OVERLOADED"),
        (http(529), "OVERLOADED"),
        (http(504), "TIMEOUT"),
        (http(408), "TIMEOUT"),
        (failure_from_exception(ConnectionResetError(104, "reset")), "CONNECTION_ERROR"),
        (failure_from_exception(ConnectionRefusedError(111, "refused")), "CONNECTION_ERROR"),
        (Failure(error_name="ConnectError", causes=[Cause(name="ConnectionRefusedError")]), "CONNECTION_ERROR"),
        (Failure(error_name="RemoteProtocolError"), "CONNECTION_ERROR"),
        (Failure(error_name="ReadTimeout"), "TIMEOUT"),
        (Failure(error_name="RuntimeError", error_code="ETIMEDOUT"), "TIMEOUT"),
        (Failure(grpc_code=14), "OVERLOADED"),
    ],
)
def test_transient_failures_are_retried(failure: Failure, failure_type: str) -> None:
    d = policy().decide(failure, 1)
    assert d.action is Action.RETRY
    assert d.failure_type == failure_type
    assert d.source == SOURCE_FAIL_OPEN
    assert d.attempts_left == 2


@pytest.mark.parametrize(
    "failure, failure_type",
    [
        (http(400), "INVALID_REQUEST"),
        (http(401), "AUTH_INVALID"),
        (http(403), "PERMISSION_DENIED"),
        (http(404), "NOT_FOUND"),
        (http(501), "UNSUPPORTED"),
        (Failure(error_name="ValueError", message="bad"), "UNKNOWN"),
        (Failure(error_name="CancelledError"), "CANCELED"),
        (Failure(error_name="ConnectionError", causes=[Cause(name="AbortError")]), "CANCELED"),
    ],
)
def test_other_failures_stop_at_once(failure: Failure, failure_type: str) -> None:
    d = policy().decide(failure, 1)
    assert d.action is Action.STOP
    assert d.stop_reason == "NOT_RETRYABLE"
    assert d.failure_type == failure_type
    assert d.recovery_action


def test_capped_exponential_backoff_with_full_jitter() -> None:
    p = policy(r=0.5, initial_delay=1.0, multiplier=2.0, max_delay=5.0, max_attempts=10)
    assert [p.decide(http(503), n).delay for n in range(1, 6)] == [0.5, 1.0, 2.0, 2.5, 2.5]
    top = policy(r=1.0, initial_delay=1.0, max_delay=5.0, max_attempts=10)
    assert [top.decide(http(503), n).delay for n in (1, 2, 3, 4, 9)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert policy(r=0.0, max_attempts=10).decide(http(503), 5).delay == 0.0
    # A huge attempt number does not overflow.
    assert policy(r=1.0, max_attempts=2000).decide(http(503), 1500).delay == 30.0


def test_attempts_are_counted_from_the_first() -> None:
    p = policy(max_attempts=3)
    assert p.decide(http(503), 2).action is Action.RETRY
    d = p.decide(http(503), 3)
    assert (d.action, d.stop_reason) == (Action.STOP, "ATTEMPTS_EXHAUSTED")


def test_retry_after_seconds_is_a_floor() -> None:
    d = policy(r=0.5).decide(http(429, retry_after="5"), 1)
    assert (d.action, d.delay, d.retry_after) == (Action.RETRY, 5.0, 5.0)
    # a backoff larger than the hint wins
    assert policy(r=1.0, initial_delay=10, max_attempts=5).decide(http(429, retry_after="1"), 2).delay == 20.0


def test_retry_after_ms_wins_over_retry_after() -> None:
    d = policy(r=0.0).decide(http(429, retry_after="9", retry_after_ms="1500"), 1)
    assert d.delay == 1.5


def test_retry_after_http_date_uses_the_injected_clock() -> None:
    date = email.utils.formatdate(NOW + 12, usegmt=True)
    d = policy(r=0.0).decide(http(503, retry_after=date), 1)
    assert d.delay == pytest.approx(12.0)
    assert retry_after({"Retry-After": email.utils.formatdate(NOW - 50, usegmt=True)}, lambda: NOW) == 0.0


@pytest.mark.parametrize("value", ["-1", "soon", "nan", "inf", ""])
def test_bad_retry_after_is_ignored(value: str) -> None:
    assert retry_after({"retry-after": value}) is None


def test_retry_after_above_the_ceiling_stops() -> None:
    d = policy(retry_after_ceiling=60).decide(http(429, retry_after="120"), 1)
    assert (d.action, d.stop_reason) == (Action.STOP, "SERVER_DELAY_ABOVE_CEILING")


def test_never_waits_past_the_deadline() -> None:
    d = policy(r=0.5).decide(http(429, retry_after="5"), 1, remaining=2.0)
    assert (d.action, d.stop_reason) == (Action.STOP, "DEADLINE")
    assert policy(r=0.5).decide(http(429, retry_after="1"), 1, remaining=2.0).action is Action.RETRY


@pytest.mark.parametrize(
    "operation, method, retried",
    [
        ("chat", "POST", True),  # a model request is safe to repeat
        ("web_fetch", "GET", True),
        ("web_fetch", "POST", False),
        ("", "PUT", False),
        ("shell.exec", "", False),
        ("deploy", "", False),
        ("file.write", "", True),  # conditional: retried after the caller rolls back
        ("", "", True),
    ],
)
def test_irreversible_operations_are_not_retried(operation: str, method: str, retried: bool) -> None:
    f = Failure(http_status=503, operation=operation, method=method)
    d = policy().decide(f, 1)
    assert (d.action is Action.RETRY) == retried
    if not retried:
        assert d.stop_reason == "IRREVERSIBLE_OPERATION"
    assert policy().decide(f, 1, safety="safe").action is Action.RETRY
