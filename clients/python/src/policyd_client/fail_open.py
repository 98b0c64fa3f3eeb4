"""The small retry policy the client falls back on when policyd is unreachable.

It retries only clearly transient failures — connection errors and timeouts
with no HTTP response, HTTP 408, 429 and 5xx (but 501), gRPC UNAVAILABLE,
RESOURCE_EXHAUSTED and DEADLINE_EXCEEDED — with capped exponential backoff
and full jitter, waiting at least a server's delay hint (``retry-after-ms``,
``retry-after`` in seconds or as an HTTP date, ``x-amz-retry-after``,
``grpc-retry-pushback-ms``) unless it is above a ceiling. Everything else
stops at once. It never waits past the caller's deadline. The Go and
TypeScript clients implement the same contract (docs/clients.md), checked by
the vectors in clients/testdata.
"""

from __future__ import annotations

import calendar
import math
import random as _random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from ._gen.policyd.v1 import policy_pb2 as pb
from .decision import SOURCE_FAIL_OPEN, Action, Decision

__all__ = ["FailOpenPolicy"]

# Python, Node and Go shapes of a broken or refused connection, and of timeouts.
# socket.gaierror is left out: its code tells a temporary failure (EAI_AGAIN)
# from no such host, which is as often a typo as an outage.
_CONNECTION_NAMES = frozenset(
    n.lower()
    for n in (
        "ConnectionError ConnectionResetError ConnectionRefusedError ConnectionAbortedError BrokenPipeError "
        "RemoteDisconnected IncompleteRead ConnectError ReadError WriteError NetworkError RemoteProtocolError "
        "ProtocolError NewConnectionError ChunkedEncodingError ServerDisconnectedError ClientConnectorError "
        "ClientOSError APIConnectionError SocketError"
    ).split()
)
_TIMEOUT_NAMES = frozenset(
    n.lower()
    for n in (
        "TimeoutError timeout ReadTimeout ConnectTimeout WriteTimeout PoolTimeout TimeoutException "
        "ReadTimeoutError ConnectTimeoutError ServerTimeoutError APITimeoutError"
    ).split()
)
_CONNECTION_CODES = frozenset(
    "ECONNRESET ECONNREFUSED ECONNABORTED EPIPE ENETUNREACH EHOSTUNREACH ENETDOWN EHOSTDOWN EAI_AGAIN "
    "UND_ERR_SOCKET UND_ERR_CLOSED ERR_STREAM_PREMATURE_CLOSE".split()
)
_TIMEOUT_CODES = frozenset(
    "ETIMEDOUT ESOCKETTIMEDOUT UND_ERR_CONNECT_TIMEOUT UND_ERR_HEADERS_TIMEOUT UND_ERR_BODY_TIMEOUT "
    "ERR_SOCKET_CONNECTION_TIMEOUT".split()
)
_CANCEL_NAMES = frozenset(n.lower() for n in "CancelledError CanceledError AbortError".split())

_GRPC_CANCELLED = 1
_GRPC_DEADLINE_EXCEEDED = 4
_GRPC_RESOURCE_EXHAUSTED = 8
_GRPC_UNAVAILABLE = 14

# What a terminal status means, for the message the caller sees.
_TERMINAL = {
    400: ("INVALID_REQUEST", "Fix the request; the same request will fail again."),
    401: ("AUTH_INVALID", "Fix the credentials (key, token or endpoint), then run again."),
    403: ("PERMISSION_DENIED", "The credentials are not allowed to use this resource."),
    404: ("NOT_FOUND", "Use a valid URL, model or resource id."),
    501: ("UNSUPPORTED", "Change approach; the service does not support the request."),
    422: ("INVALID_REQUEST", "Fix the request; the same request will fail again."),
}


@dataclass
class FailOpenPolicy:
    """Decide retries without the daemon.

    After attempt ``n`` fails with a transient failure the delay is uniform in
    ``[0, min(max_delay, initial_delay × multiplier^(n-1))]`` (full jitter),
    raised to the server's Retry-After when that is larger; a Retry-After
    above ``retry_after_ceiling`` stops instead. ``max_attempts`` counts every
    attempt, the first included. ``random`` (uniform in [0, 1)) and ``now``
    (wall-clock seconds, for HTTP-date Retry-After) are injectable so that
    tests are deterministic.
    """

    max_attempts: int = 3
    initial_delay: float = 1.0
    max_delay: float = 30.0
    multiplier: float = 2.0
    retry_after_ceiling: float = 60.0
    random: Callable[[], float] = field(default=_random.random, repr=False)
    now: Callable[[], float] = field(default=time.time, repr=False)

    def decide(
        self, failure: pb.Failure, attempt: int, *, remaining: float | None = None, safety: str | None = None
    ) -> Decision:
        """Return what to do after ``attempt`` (1-based) failed with ``failure``.

        ``remaining`` is the time left before the caller's deadline in
        seconds (None: no deadline); a retry that would land past it stops.
        ``safety`` ("safe", "conditional", "irreversible") is derived from the
        failure's operation and method as policyd derives it when None; an
        irreversible operation is never retried.
        """
        failure_type, transient, recovery = self.classify(failure)
        hint = retry_after(failure.headers, self.now)

        def decision(
            action: Action, reason: str, stop_reason: str = "", stop_text: str = "", delay: float = 0.0
        ) -> Decision:
            return Decision(
                action,
                delay=delay,
                failure_type=failure_type,
                retryable=transient,
                rule=f"fail_open.{failure_type.lower()}",
                reason=f"policyd unreachable; {reason}",
                recovery_action=recovery,
                retry_after=hint,
                attempts_left=max(self.max_attempts - attempt, 0) if action is Action.RETRY else 0,
                stop_reason=stop_reason,
                stop_text=stop_text,
                strategy=f"fail-open/{failure_type}",
                source=SOURCE_FAIL_OPEN,
            )

        if not transient:
            return decision(
                Action.STOP,
                "the fail-open policy retries only connection errors, timeouts, 408, 429 and 5xx",
                "NOT_RETRYABLE",
                f"{_describe(failure)} is not retried by the fail-open policy",
            )
        if (safety or derive_safety(failure.operation, failure.method)) == "irreversible":
            return decision(
                Action.STOP,
                "an irreversible operation is not retried",
                "IRREVERSIBLE_OPERATION",
                "the operation is irreversible; retrying it could repeat its effect",
            )
        if attempt >= self.max_attempts:
            return decision(
                Action.STOP,
                "the fail-open policy's attempts are spent",
                "ATTEMPTS_EXHAUSTED",
                f"{self.max_attempts} attempts made (fail-open policy)",
            )
        if hint is not None and hint > self.retry_after_ceiling:
            return decision(
                Action.STOP,
                "the server asked for a longer wait than the fail-open ceiling",
                "SERVER_DELAY_ABOVE_CEILING",
                f"the server asked to wait {hint:g}s, above the fail-open ceiling of {self.retry_after_ceiling:g}s",
            )
        delay = self.backoff(attempt)
        if hint is not None:
            delay = max(delay, hint)
        if remaining is not None and delay > remaining:
            return decision(
                Action.STOP,
                "waiting would pass the deadline",
                "DEADLINE",
                f"waiting {delay:.3g}s would pass the deadline ({max(remaining, 0):.3g}s left)",
            )
        return decision(Action.RETRY, "a transient failure, retried by the fail-open policy", delay=delay)

    def backoff(self, attempt: int) -> float:
        """Return the jittered backoff after ``attempt`` failed."""
        try:
            cap = min(self.max_delay, self.initial_delay * self.multiplier ** max(attempt - 1, 0))
        except OverflowError:
            cap = self.max_delay
        return max(0.0, min(1.0, self.random())) * cap

    @staticmethod
    def classify(failure: pb.Failure) -> tuple[str, bool, str]:
        """Return (failure type, transient?, recovery action) for a failure."""
        names = {failure.error_name.lower()} | {c.name.lower() for c in failure.causes}
        codes = {failure.error_code.upper()} | {c.code.upper() for c in failure.causes}
        if names & _CANCEL_NAMES or failure.grpc_code == _GRPC_CANCELLED:
            return "CANCELED", False, "Nothing to retry; the operation was cancelled by its caller."
        status = failure.http_status
        if status == 429:
            return "RATE_LIMIT", True, "Wait and retry with backoff, honouring the server's delay."
        if status in (503, 529):
            return "OVERLOADED", True, "Retry with backoff."
        if status in (408, 504):
            return "TIMEOUT", True, "Retry; raise the timeout if it persists."
        if 500 <= status <= 599 and status != 501:
            return "SERVER_ERROR", True, "Retry with backoff."
        if status:
            failure_type, recovery = _TERMINAL.get(status, ("UNKNOWN", f"Inspect the HTTP {status} response."))
            return failure_type, False, recovery
        if failure.grpc_code == _GRPC_UNAVAILABLE:
            return "OVERLOADED", True, "Retry with backoff."
        if failure.grpc_code == _GRPC_RESOURCE_EXHAUSTED:
            return "RATE_LIMIT", True, "Wait and retry with backoff."
        if failure.grpc_code == _GRPC_DEADLINE_EXCEEDED:
            return "TIMEOUT", True, "Retry; raise the timeout if it persists."
        if names & _TIMEOUT_NAMES or codes & _TIMEOUT_CODES:
            return "TIMEOUT", True, "Retry; raise the timeout if it persists."
        if names & _CONNECTION_NAMES or codes & _CONNECTION_CODES:
            return "CONNECTION_ERROR", True, "Retry after a short backoff; check the network if it persists."
        return "UNKNOWN", False, "Inspect the error; the fail-open policy retries only clearly transient failures."


_MODEL_OPERATIONS = ("chat", "completion", "complete", "embed", "messages", "responses", "generate", "model", "llm")
_IRREVERSIBLE_OPERATIONS = ("shell", "exec", "deploy", "external_write", "api.write", "payment")
_CONDITIONAL_OPERATIONS = ("file.write", "file.edit", "write_file", "edit_file", "patch")


def derive_safety(operation: str, method: str) -> str:
    """Return "safe", "conditional" or "irreversible" as policyd derives it.

    Model operations (``chat*``, ``completion*``, ``messages*``, ...) are safe
    whatever the method; with a method, GET, HEAD and OPTIONS are safe and any
    other is irreversible; without one, ``shell*``, ``exec*``, ``deploy*``
    (and other external writes) are irreversible, ``file.write*`` and
    ``file.edit*`` conditional, anything else safe.
    """
    op = operation.lower()
    if op.startswith(_MODEL_OPERATIONS):
        return "safe"
    m = method.strip().upper()
    if m:
        return "safe" if m in ("GET", "HEAD", "OPTIONS") else "irreversible"
    if op.startswith(_IRREVERSIBLE_OPERATIONS):
        return "irreversible"
    if op.startswith(_CONDITIONAL_OPERATIONS):
        return "conditional"
    return "safe"


# A hint longer than a week is garbage, as policyd reads it.
_MAX_HINT = 7 * 24 * 3600.0
_NUMBER = re.compile(r"[+]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", re.ASCII)
_MONTHS = {m: i + 1 for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split())}
_DAY = r"(?:mon|tue|wed|thu|fri|sat|sun)"
# The HTTP-dates policyd reads: IMF-fixdate (and its one-digit-day, UTC
# variant), RFC 850 and asctime. email.utils is laxer than policyd.
_HTTP_DATES = [
    re.compile(
        _DAY + r", (?P<d>\d{1,2}) (?P<m>[a-z]{3}) (?P<y>\d{4}) (?P<H>\d{1,2}):(?P<M>\d\d):(?P<S>\d\d) (?:gmt|utc)",
        re.I | re.A,
    ),
    re.compile(
        r"(?:mon|tues|wednes|thurs|fri|satur|sun)day, (?P<d>\d\d)-(?P<m>[a-z]{3})-(?P<y>\d\d) (?P<H>\d{1,2}):(?P<M>\d\d):(?P<S>\d\d) gmt",
        re.I | re.A,
    ),
    re.compile(
        _DAY + r" (?P<m>[a-z]{3})  ?(?P<d>\d{1,2}) (?P<H>\d{1,2}):(?P<M>\d\d):(?P<S>\d\d) (?P<y>\d{4})", re.I | re.A
    ),
]


def retry_after(headers: Mapping[str, str], now: Callable[[], float] = time.time) -> float | None:
    """Return the server's delay hint in seconds from response headers, or None.

    The most trusted source with a usable value wins: ``retry-after-ms``,
    ``retry-after`` (seconds or an HTTP date, counted from the ``date``
    header when it parses, else from ``now()``), ``x-amz-retry-after``,
    ``grpc-retry-pushback-ms`` (milliseconds). Zero and a past date are a
    hint of 0; negative, unparsable and longer-than-a-week values are no
    hint. This is policyd's reading (docs/clients.md).
    """
    lower = {k.lower(): v for k, v in headers.items()}
    if "retry-after-ms" in lower:
        v = _number(lower["retry-after-ms"], 0.001)
        if v is not None:
            return v
    if "retry-after" in lower:
        v = _retry_after_value(lower["retry-after"], lower.get("date"), now)
        if v is not None:
            return v
    for name in ("x-amz-retry-after", "grpc-retry-pushback-ms"):
        if name in lower:
            v = _number(lower[name], 0.001)
            if v is not None:
                return v
    return None


def _number(v: str, unit: float) -> float | None:
    """Return a plain non-negative decimal times unit (seconds), or None."""
    v = v.strip()
    if not _NUMBER.fullmatch(v):
        return None
    s = float(v) * unit
    return s if math.isfinite(s) and s <= _MAX_HINT else None


def _retry_after_value(v: str, date: str | None, now: Callable[[], float]) -> float | None:
    v = v.strip()
    s = _number(v, 1.0)
    if s is not None or not v or v[0] in "+-.0123456789":
        return s
    when = _http_date(v)
    if when is None:
        return None
    # The server's clock, when it says, is immune to skew.
    ref = _http_date(date.strip()) if date else None
    d = max(0.0, when - (now() if ref is None else ref))
    return d if d <= _MAX_HINT else None


def _http_date(v: str) -> float | None:
    """Return an HTTP-date as a Unix time, or None."""
    for pattern in _HTTP_DATES:
        m = pattern.fullmatch(v)
        if m is None:
            continue
        month = _MONTHS.get(m["m"].lower())
        year = int(m["y"])
        if len(m["y"]) == 2:
            year += 1900 if year >= 69 else 2000
        try:
            return float(
                calendar.timegm(
                    datetime(year, month or 0, int(m["d"]), int(m["H"]), int(m["M"]), int(m["S"])).timetuple()
                )
            )
        except ValueError:
            return None
    return None


def _describe(failure: pb.Failure) -> str:
    if failure.http_status:
        return f"HTTP {failure.http_status}"
    return failure.error_name or failure.error_code or "the failure"
