"""What the sync and asyncio clients share: options, per-call state, requests, warnings."""

from __future__ import annotations

import datetime as _dt
import ipaddress
import logging
import os
import secrets
import socket
import sys
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, NamedTuple, Union

import grpc

from ._gen.policyd.v1 import journal_pb2 as jpb
from ._gen.policyd.v1 import policy_pb2 as pb
from .decision import Action, Decision
from .failure import FailureMapper, clip_label, failure_from_exception

if TYPE_CHECKING:
    from ._otel import Retry

if sys.version_info >= (3, 14):
    from uuid import uuid7 as _uuid7
else:  # the uuid6 package: a dependency below Python 3.14 only (pyproject.toml)
    from uuid6 import uuid7 as _uuid7

#: The daemon address when neither ``addr`` nor ``POLICYD_ADDR`` is given
#: (``make run`` serves there).
DEFAULT_ADDR = "127.0.0.1:7433"
#: How long one RPC to the daemon may take before the client decides without
#: it (seconds). Short, because the answer is a few microseconds of work.
DEFAULT_TIMEOUT = 1.0
#: No strategy allows more attempts; a loop guard against a misbehaving daemon.
MAX_ATTEMPTS = 1000
#: Decision.source of a decision the client made itself (deadline passed).
SOURCE_CLIENT = "client"

#: A caller's deadline: seconds from the start of the call, a timedelta, or
#: an absolute datetime (naive datetimes are local time).
Deadline = Union[float, int, _dt.timedelta, _dt.datetime]
#: Whether the operation may be repeated (policyd's OperationSafety); None
#: lets the daemon derive it from the operation and method.
Safety = Literal["safe", "conditional", "irreversible"]

_SAFETY = {
    "safe": pb.OPERATION_SAFETY_SAFE,
    "conditional": pb.OPERATION_SAFETY_CONDITIONAL,
    "irreversible": pb.OPERATION_SAFETY_IRREVERSIBLE,
}

#: Channel options: policyd is a loopback, plaintext daemon; an http_proxy in
#: the environment must not reroute it. Keepalive pings (only while a call,
#: in practice the fleet's Coordinate stream, is open) every 30 s, no more
#: often than the daemon's enforcement policy allows (15 s). While policyd is
#: away the channel redials every 0.5 to 1 s (gRPC's own default grows to two
#: minutes), so that calls and the fleet stream notice its return within about
#: a second.
CHANNEL_OPTIONS = (
    ("grpc.enable_http_proxy", 0),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.initial_reconnect_backoff_ms", 500),
    ("grpc.min_reconnect_backoff_ms", 500),
    ("grpc.max_reconnect_backoff_ms", 1000),
)

#: The waits between background attempts to finish a journal context policyd
#: did not answer for: about a minute in all, long enough for a daemon restart.
#: policyd marks a context nobody finished abandoned after its --abandon-after.
FINISH_RETRY_DELAYS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0)

# The status codes that mean "the daemon is not there or not answering".
_OUTAGE_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)

log = logging.getLogger("policyd_client")


#: The port of an address that names none: policyd's own, not HTTP's 80 or 443.
DEFAULT_PORT = 7433


@dataclass(frozen=True)
class Address:
    """A parsed daemon address: the gRPC target host:port, and whether its scheme asked for TLS."""

    target: str
    tls: bool


def parse_addr(addr: str) -> Address:
    """Read the one address grammar every client accepts (docs/clients.md, "The daemon address").

    ``[http:// | https://] host [:port] [/]``: host a name, an IPv4 address or a
    bracketed IPv6 address; port DEFAULT_PORT when none is given; http:// is
    plaintext, as no scheme is, and https:// turns TLS on. Anything else raises
    ValueError naming what is wrong, so that a typo fails here rather than
    looking like an outage.
    """
    rest = addr.strip()
    tls = False
    if "://" in rest:
        scheme, rest = rest.split("://", 1)
        if scheme.lower() not in ("http", "https"):
            raise ValueError(f"address {addr!r}: scheme {scheme!r}: want http:// or https:// (or none)")
        tls = scheme.lower() == "https"
    if rest.endswith("/"):
        rest = rest[:-1]
    if any(c in rest for c in "/?# \t"):
        raise ValueError(f"address {addr!r}: want [http://|https://]host[:port], without a path")
    host, port = rest, ""
    if rest.startswith("["):
        end = rest.find("]")
        if end < 0:
            raise ValueError(f"address {addr!r}: unclosed [ in an IPv6 address")
        host, tail = rest[1:end], rest[end + 1 :]
        if tail:
            if not tail.startswith(":"):
                raise ValueError(f"address {addr!r}: want [IPv6]:port")
            port = tail[1:]
            if not port:
                raise ValueError(f"address {addr!r}: empty port")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"address {addr!r}: {host!r} is not an IPv6 address") from None
        host = f"[{host}]"
    elif rest.count(":") > 1:
        raise ValueError(f"address {addr!r}: too many colons (write an IPv6 address in brackets: [::1]:{DEFAULT_PORT})")
    elif ":" in rest:
        host, port = rest.split(":", 1)
        if not port:
            raise ValueError(f"address {addr!r}: empty port")
    if not host:
        raise ValueError(f"address {addr!r}: no host")
    n = DEFAULT_PORT
    if port:
        if not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535:
            raise ValueError(f"address {addr!r}: port {port!r}: want a number in 1..65535")
        n = int(port)
    return Address(f"{host}:{n}", tls)


def resolve_addr(addr: str | None) -> Address:
    """Parse addr, else $POLICYD_ADDR, else DEFAULT_ADDR; ValueError names the source of a bad one."""
    given = addr or os.environ.get("POLICYD_ADDR") or DEFAULT_ADDR
    try:
        return parse_addr(given)
    except ValueError as e:
        source = "addr" if addr else "POLICYD_ADDR"
        raise ValueError(f"policyd: {source}: {e}") from None


def default_agent(program: str) -> str:
    """The agent a journaled context names when the caller gives none, the same in every client.

    The program's file name without its extension (``/usr/bin/fetcher`` and
    ``fetcher.py`` are both ``fetcher``), or the package's name for a
    ``__main__`` file (``python -m pkg``): the journal's views group by agent,
    so a Go binary, a Python script and a Node script of the same name land in
    one row.
    """
    parts = program.replace("\\", "/").split("/")
    base = parts[-1]
    if "." in base[1:]:
        base = base[: base.rindex(".")]
    if base == "__main__":
        parent = next((p for p in reversed(parts[:-1]) if p and p != "."), "")
        base = parent or base
    return base


def program_agent() -> str:
    """default_agent of this process's script; "python" when there is none (an interactive session)."""
    return default_agent(sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c", "-") else "") or "python"


def resolve_client_id(given: str | None) -> str:
    """Return the client id a client sends: the given one, else host/pid/8 random hex digits.

    Unique per client instance: the fleet's circuit breakers count distinct
    clients, so two processes (or two clients) must not share one.
    """
    return clip_label(given or f"{socket.gethostname()}/{os.getpid()}/{secrets.randbits(32):08x}")


class Spec(NamedTuple):  # a tuple, not a frozen dataclass: every call makes one
    """One call's options, the client's defaults filled in."""

    provider: str
    model: str
    key_id: str
    operation: str
    method: str
    profile: str
    journal: bool
    agent: str
    labels: Mapping[str, str]
    context_id: str | None
    safety: Safety | None
    retry_fetch_errors: bool
    continue_on_failed_api_call: bool | None
    mapper: FailureMapper
    client_id: str

    def failure(self, exc: BaseException) -> pb.Failure:
        """Map exc with the call's mapper and fill in what the call knows."""
        f = self.mapper(exc)
        if self.provider and not f.provider:
            f.provider = self.provider
        if self.model and not f.model:
            f.model = self.model
        if self.operation and not f.operation:
            f.operation = self.operation
        if self.method:
            f.method = self.method.upper()
        if self.key_id:  # the caller knows which credential it used; a mapper cannot
            f.key_id = self.key_id
        f.key_id = clip_label(f.key_id)
        return f

    def options(self) -> pb.ClassifyOptions:
        o = pb.ClassifyOptions(retry_fetch_errors=self.retry_fetch_errors)
        if self.continue_on_failed_api_call is not None:
            o.continue_on_failed_api_call = self.continue_on_failed_api_call
        return o


@dataclass
class State:
    """One call's progress."""

    start: float  # clock() at the start
    deadline: float | None  # clock() value of the caller's deadline
    wall_offset: float  # time.time() - clock() at the start, to send the deadline
    journal: bool
    context_id: str | None
    attempt: int = 0
    failed: bool = False  # an attempt failed: a journaled call has a context to finish
    begun: bool = False  # BeginContext succeeded
    finished: bool = False
    # Attempts policyd has not journaled (journaled=false, or decided while it
    # was unreachable), recorded when the call ends; recording is idempotent.
    pending: list[jpb.RecordAttemptRequest] = field(default_factory=list)
    # With OpenTelemetry on: the retry being waited for, counted when it is sent (_otel.Retry).
    retrying: Retry | None = None

    def remaining(self, now: float) -> float | None:
        return None if self.deadline is None else self.deadline - now

    def open(self) -> bool:
        """Whether a journaled context still needs finishing."""
        return self.journal and self.failed and not self.finished

    def begun_context(self) -> str | None:
        """The context id errors and hooks name: None until the context was begun."""
        return self.context_id if self.begun else None

    def journal_id(self) -> str:
        """The context id NextDelay records under ("" unless begun)."""
        return (self.context_id or "") if self.journal and self.begun else ""


def deadline_of(deadline: Deadline | None, now: float, wall_now: float) -> float | None:
    """Return the deadline as a clock() value, or None."""
    if deadline is None:
        return None
    if isinstance(deadline, _dt.datetime):
        return now + (deadline.timestamp() - wall_now)
    if isinstance(deadline, _dt.timedelta):
        return now + deadline.total_seconds()
    if isinstance(deadline, (int, float)) and not isinstance(deadline, bool):
        return now + float(deadline)
    raise TypeError(f"deadline must be seconds, a timedelta or a datetime, not {type(deadline).__name__}")


def next_delay_request(spec: Spec, st: State, failure: pb.Failure, now: float) -> pb.NextDelayRequest:
    req = pb.NextDelayRequest(
        failure=failure,
        attempt=min(st.attempt, MAX_ATTEMPTS),
        profile=spec.profile,
        options=spec.options(),
        context_id=st.journal_id(),
        client_id=spec.client_id,
    )
    req.elapsed.FromNanoseconds(max(int((now - st.start) * 1e9), 0))
    if st.deadline is not None:
        req.deadline.FromNanoseconds(int((st.deadline + st.wall_offset) * 1e9))
    if spec.safety is not None:
        req.safety = _SAFETY[spec.safety]
    return req


def begin_request(spec: Spec, st: State) -> jpb.BeginContextRequest:
    return jpb.BeginContextRequest(
        context_id=st.context_id or "",
        agent=spec.agent,
        provider=spec.provider,
        model=spec.model,
        operation=spec.operation,
        profile=spec.profile,
        labels=dict(spec.labels),
    )


def record_request(
    spec: Spec, st: State, failure: pb.Failure, decision: Decision, duration: float
) -> jpb.RecordAttemptRequest:
    req = jpb.RecordAttemptRequest(
        context_id=st.context_id or "",
        attempt=min(st.attempt, MAX_ATTEMPTS),
        failure=failure,
        decision=decision.to_proto(),
        profile=spec.profile,
        options=spec.options(),
    )
    req.duration.FromNanoseconds(max(int(duration * 1e9), 0))
    return req


def deadline_decision() -> Decision:
    """The decision when the caller's deadline has already passed."""
    return Decision(
        Action.STOP,
        stop_reason="DEADLINE",
        stop_text="the caller's deadline has passed",
        reason="the caller's deadline has passed",
        source=SOURCE_CLIENT,
    )


def attempts_decision() -> Decision:
    return Decision(
        Action.STOP,
        stop_reason="ATTEMPTS_EXHAUSTED",
        stop_text=f"{MAX_ATTEMPTS} attempts made",
        reason="the client's attempt guard",
        source=SOURCE_CLIENT,
    )


def new_context_id() -> str:
    """Return a new RetryContext id: a time-ordered UUIDv7 (RFC 9562).

    Time-ordered, not random (v4): the journal's primary keys are B-trees on
    the context id, and random ids land on random pages of a large table,
    which costs full-page images in the WAL after each checkpoint (+60 % WAL
    bytes measured on a 6M-row table), buffer misses and ~6-7 µs more per
    row; v7 ids are appended at the right edge of the index. The standard
    library's uuid.uuid7 from Python 3.14, the uuid6 package's before.
    """
    return str(_uuid7())


def new_state(deadline: Deadline | None, journal: bool, context_id: str | None, now: float, wall_now: float) -> State:
    if context_id is not None:
        context_id = str(uuid.UUID(context_id))  # a bad id fails here, not at the daemon
    return State(
        start=now,
        deadline=deadline_of(deadline, now, wall_now),
        wall_offset=wall_now - now,
        journal=journal,
        context_id=context_id or (new_context_id() if journal else None),
    )


def rpc_code(err: BaseException) -> grpc.StatusCode | None:
    """Return a gRPC error's status code, or None."""
    code = getattr(err, "code", None)
    if not callable(code):
        return None
    try:
        c = code()
    except Exception:
        return None
    return c if isinstance(c, grpc.StatusCode) else None


def rpc_text(err: BaseException) -> str:
    code = rpc_code(err)
    details = getattr(err, "details", None)
    text = ""
    if callable(details):
        try:
            text = str(details() or "")
        except Exception:
            text = ""
    return f"{code.name if code else type(err).__name__}: {text or err}"


#: The failure fields the call's options set (the rest come from the attempt's exception).
_CALLER_FAILURE_FIELDS = frozenset(
    ("failure.provider", "failure.model", "failure.operation", "failure.method", "failure.key_id")
)


def caller_mistake(code: str, message: str) -> bool:
    """Whether a daemon's answer (status code name, message) is a mistake in the caller's configuration.

    Every client raises these instead of failing open (clients/testdata/refusals.json):
    UNAUTHENTICATED, and INVALID_ARGUMENT naming any field but one mapped from
    the attempt's exception. The daemon's message starts with the field's path
    (``profile: ...``, ``failure.headers: ...``); an odd value the exception
    gave is no reason to stop retrying.
    """
    if code == "UNAUTHENTICATED":
        return True
    if code != "INVALID_ARGUMENT":
        return False
    field, sep, _ = message.partition(": ")
    if not sep or (field != "failure" and not field.startswith("failure.")):
        return True
    return field in _CALLER_FAILURE_FIELDS


def is_outage(err: BaseException) -> bool:
    return rpc_code(err) in _OUTAGE_CODES


def is_journal_off(err: BaseException) -> bool:
    """policyd's answer to journal RPCs when it runs without a database."""
    return rpc_code(err) in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNIMPLEMENTED)


def rpc_timeout(timeout: float, remaining: float | None) -> float | None:
    """Return an RPC's timeout within the caller's deadline, or None when it has passed."""
    if remaining is None:
        return timeout
    return min(timeout, remaining) if remaining > 0 else None


def finish_timeout(timeout: float, remaining: float | None) -> float:
    """The timeout of the RPCs that end a call: within the deadline, but at least 100 ms."""
    return timeout if remaining is None else min(timeout, max(remaining, 0.1))


def bounded(delay: float, remaining: float | None) -> float:
    """Return delay, never below 0 nor past the deadline."""
    delay = max(delay, 0.0)
    return delay if remaining is None else max(min(delay, remaining), 0.0)


@dataclass
class Warnings:
    """Warn once per outage, not once per failed call."""

    addr: str
    logger: logging.Logger
    _down: str | None = None
    _journal_warned: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def daemon_failed(self, err: BaseException) -> None:
        key = rpc_code(err)
        name = key.name if key else type(err).__name__
        with self._lock:
            first = self._down != name
            self._down = name
        if first:
            self.logger.warning(
                "policyd at %s did not answer (%s); deciding retries with the built-in fail-open policy",
                self.addr,
                rpc_text(err),
            )
        else:
            self.logger.debug("policyd at %s did not answer (%s)", self.addr, rpc_text(err))

    def daemon_ok(self) -> None:
        with self._lock:
            was, self._down = self._down, None
        if was is not None:
            self.logger.info("policyd at %s answers again", self.addr)

    def journal_failed(self, what: str, err: BaseException) -> None:
        with self._lock:
            first, self._journal_warned = not self._journal_warned, True
        level = logging.WARNING if first else logging.DEBUG
        if is_journal_off(err):
            msg = "policyd journal: the daemon's journal is off (start policyd serve with --database-url); %s: %s"
        else:
            msg = "policyd journal: %s failed (%s); the call goes on unjournaled"
        self.logger.log(level, msg, what, rpc_text(err))


def log_retry(logger: logging.Logger, spec: Spec, attempt: int, delay: float, failure: pb.Failure, d: Decision) -> None:
    logger.info(
        "policyd: retrying %s after attempt %d in %.3fs: %s (%s)",
        spec.operation or spec.provider or "operation",
        attempt,
        delay,
        d.failure_type or failure.error_name or f"HTTP {failure.http_status}",
        d.source,
    )


def default_mapper(mapper: FailureMapper | None) -> FailureMapper:
    return mapper or failure_from_exception
