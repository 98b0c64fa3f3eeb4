"""The synchronous client: ``Client.call`` and the ``@Client.retry`` decorator."""

from __future__ import annotations

import functools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import grpc

from . import _auth, _core, _fleet, _stream, _texts
from ._base import ClientBase, Gated
from ._core import Deadline, Safety, Spec, State
from ._gate import GRACE, GateAction, GateVerdict
from ._gen.policyd.v1 import journal_pb2 as jpb
from ._gen.policyd.v1 import policy_pb2 as pb
from ._stubs import JournalStub, PolicyStub, journal_stub, policy_stub
from .decision import Action, Decision, FallbackHint, RetryEvent
from .errors import PolicydConfigError, RetryCancelled
from .fail_open import FailOpenPolicy
from .failure import FailureMapper

if TYPE_CHECKING:
    import httpx
    import httpx2
    from typing_extensions import Unpack

    from .transport import TransportOptions

__all__ = ["Client"]

T = TypeVar("T")
P = ParamSpec("P")


class Client(ClientBase):
    """Run operations under policyd's retry policy.

    ``addr`` is the daemon's address (default ``$POLICYD_ADDR``, else
    127.0.0.1:7433): ``[http://|https://]host[:port]``, port 7433 when none
    is given, ``https://`` turning TLS on; anything else raises ValueError. Every RPC waits at most ``timeout`` seconds (and never
    past the call's deadline); a daemon that does not answer in time, or at
    all, is replaced by ``fail_open`` (a :class:`FailOpenPolicy` by default)
    and a warning is logged once per outage on the ``policyd_client`` logger.

    ``profile``, ``agent``, ``journal`` and ``labels`` are defaults for every
    call; ``agent`` defaults to the script's file name without its
    extension. ``failure_mapper`` turns an exception into a Failure
    (:func:`failure_from_exception` by default). ``on_retry`` is called before
    each sleep. ``clock`` (monotonic seconds) and ``sleep`` are injectable for
    tests; with a custom ``sleep`` a ``cancel`` event is checked after it
    returns. ``channel`` replaces the channel the client would open.

    ``token`` (default ``$POLICYD_TOKEN``) is sent as ``authorization: Bearer
    TOKEN`` on every call, in plaintext only to a loopback address. ``tls``
    turns TLS on (default: on when a CA or client certificate is given);
    ``tls_ca`` is a PEM CA file (default ``$POLICYD_TLS_CA``, else the system
    roots), ``tls_cert`` and ``tls_key`` a client certificate and key for
    mutual TLS (default ``$POLICYD_TLS_CERT``, ``$POLICYD_TLS_KEY``). A daemon
    that answers UNAUTHENTICATED makes ``call`` raise
    :class:`PolicydAuthError` instead of failing open, and one that refuses a
    call's own options (INVALID_ARGUMENT: an unknown profile, a bad
    ``context_id``) :class:`PolicydOptionsError`.

    ``client_id`` names this client to policyd (at most 128 bytes; default:
    the host name, the process id and 8 random hex digits, new for every
    Client). The fleet's circuit breakers count distinct clients, so two
    clients must not share one.

    ``fleet_gate`` (default on) checks the first attempt of every call that
    names a ``provider`` against the fleet's assignment for its target
    (provider, model, key id), kept up to date by one background Coordinate
    stream (a daemon thread, opened by the first such call; a target's first
    call waits at most 100 ms for its assignment, and no call ever waits on an
    RPC otherwise): the attempt is sent, sent after waiting out a hold, handed
    to ``fallback``, or not sent (:class:`RetryStopped` with ``attempts`` 0
    and a :class:`FleetGateError`). ``fleet_grace`` is how long (seconds) an
    assignment is still used past its ttl when policyd cannot be reached,
    before every first attempt goes (the process's own retry budget then
    limits only retries); ``park_limit`` how long (seconds, default 120; 0:
    off) a call without a deadline may wait parked behind the fleet's open
    breaker or pace (docs/clients.md, "The fleet gate", "Parking"). The
    gate's draws use ``fail_open.random``.

    A Client is thread-safe; close it (or use ``with``) to close its stream
    and channel.
    """

    def __init__(
        self,
        addr: str | None = None,
        *,
        timeout: float = _core.DEFAULT_TIMEOUT,
        profile: str = "",
        agent: str | None = None,
        journal: bool = False,
        labels: Mapping[str, str] | None = None,
        fail_open: FailOpenPolicy | None = None,
        failure_mapper: FailureMapper | None = None,
        on_retry: Callable[[RetryEvent], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] | None = None,
        channel: grpc.Channel | None = None,
        logger: logging.Logger | None = None,
        token: str | None = None,
        tls: bool | None = None,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        client_id: str | None = None,
        fleet_gate: bool = True,
        fleet_grace: float = GRACE,
        park_limit: float | None = None,
    ) -> None:
        self._setup(
            addr,
            channel_given=channel is not None,
            timeout=timeout,
            profile=profile,
            agent=agent,
            journal=journal,
            labels=labels,
            fail_open=fail_open,
            failure_mapper=failure_mapper,
            on_retry=on_retry,
            clock=clock,
            logger=logger,
            token=token,
            tls=tls,
            tls_ca=tls_ca,
            tls_cert=tls_cert,
            tls_key=tls_key,
            client_id=client_id,
            fleet_gate=fleet_gate,
            fleet_grace=fleet_grace,
            park_limit=park_limit,
        )
        self._sleep = sleep
        self._closing = threading.Event()  # set by close(): background finishing stops
        self._channel = channel or _auth.sync_channel(self.addr, self._security)
        #: The generated PolicyService stub, for calls the client does not wrap.
        self.policy: PolicyStub = policy_stub(self._channel)
        #: The generated JournalService stub (GetContext, GetErrorReport, ListContexts, ...).
        self.journal_service: JournalStub = journal_stub(self._channel)
        self._stream: _stream.SyncStream | None = None
        if self._fleet is not None:
            self._stream = _stream.SyncStream(self._fleet, self._channel, self._stream_settings())
            # A client dropped without close(), or alive at exit, still ends its stream.
            self._close_stream = weakref.finalize(self, self._stream.close)

    def close(self) -> None:
        """Close the fleet stream, and the channel the client opened (not one it was given).

        Journal contexts still being finished in the background (policyd was
        away when their calls ended) are left for policyd to mark abandoned.
        """
        self._closing.set()
        if self._stream is not None:
            self._close_stream()
        if self._own_channel:
            self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(
        self,
        fn: Callable[[], T],
        *,
        provider: str = "",
        model: str = "",
        key_id: str = "",
        operation: str = "",
        method: str = "",
        profile: str | None = None,
        journal: bool | None = None,
        fallback: Callable[[FallbackHint], T] | None = None,
        deadline: Deadline | None = None,
        cancel: threading.Event | None = None,
        context_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        safety: Safety | None = None,
        retry_fetch_errors: bool = False,
        continue_on_failed_api_call: bool | None = None,
        priority: _fleet.Priority = "interactive",
        input_tokens: int = 0,
    ) -> T:
        """Run ``fn()`` until it succeeds or policyd says stop; return its result.

        On success no RPC is made, except ``FinishContext`` for a journaled call
        that had failed before. On an exception (``Exception``, never
        ``KeyboardInterrupt`` and friends) the client maps it to a Failure,
        asks ``NextDelay`` and then sleeps the delay and tries again, raises
        :class:`RetryStopped` from the exception (with the decision's reason
        and recovery action), or, on FALL_BACK with a ``fallback`` function,
        returns ``fallback(FallbackHint)``.

        ``provider``, ``model``, ``operation`` and ``method`` describe the call
        to policyd (``operation="chat"`` marks an LLM call as safe to repeat;
        ``method="POST"`` without such an operation is not repeated).
        ``key_id`` labels the credential or account the call uses (at most 128
        bytes), e.g. ``"prod-key"`` or a hash of the key — never the key
        itself. policyd's fleet memory shares rate limits, quotas and auth
        failures per key: one agent's revoked key or exhausted quota stops the
        others on the same key, not everyone.
        ``deadline`` bounds the whole call: seconds from now, a timedelta or a
        datetime. Setting ``cancel`` stops a sleep at once and raises
        :class:`RetryCancelled`. With ``journal`` the attempts go into a
        RetryContext (id ``context_id``, else a new UUIDv7), begun at the first
        failure and finished RESOLVED (success, or a fallback that returned),
        FAILED (an error report is written) or ABANDONED (cancelled).
        ``priority`` is the call's class for the fleet gate: ``"interactive"``
        (someone waits for the answer), or ``"batch"``, whose first attempts the
        fleet sheds first when it paces the target. ``input_tokens`` is what the
        call sends, exact or estimated (0: unknown), reported to the fleet with
        its first attempt and each retry so that policyd can pace a token limit.
        """
        gc = _fleet.gate_call(priority, input_tokens)
        spec = self._spec(
            provider, model, key_id, operation, method, profile, journal, context_id, labels, safety,
            retry_fetch_errors, continue_on_failed_api_call,
        )  # fmt: skip
        st, gate = self._start(spec, deadline, gc)
        if gate is not None:
            if self._stream is not None:
                self._stream.start()
                self._stream.first_call(gate.target, self._remaining(st))  # at most 100 ms, once per target
            v = gate.first(st, fallback is not None)
            fn = gate.table.in_flight(gate.target, fn)  # each attempt counted in flight while it runs
            if v.action is GateAction.PARK:
                v = self._park(gate, v, cancel)
            if v.action is GateAction.WAIT:
                if self._wait(v.wait, cancel):
                    raise _texts.gate_cancelled(gate.target)
            elif v.action is GateAction.FALL_BACK and fallback is not None:
                return fallback(_texts.gate_fallback(gate.target, v))
            elif v.action is not GateAction.ADMIT:
                stopped = _texts.gate_stopped(gate.target, v)
                raise stopped from stopped.error
        try:
            last_exc: Exception | None = None
            while True:
                st.attempt += 1
                if st.attempt > 1 and gate is not None:
                    rv = gate.retry(st)
                    if rv.action is GateAction.PARK:
                        rv = self._park(gate, rv, cancel)
                    if last_exc is not None and gate.retry_refused(rv):
                        self._finish(spec, st, jpb.OUTCOME_FAILED)
                        raise gate.retry_stopped(st, rv, last_exc) from last_exc
                    gate.retried()
                started = self._clock()
                try:
                    result = fn()
                except Exception as exc:
                    last_exc = exc
                    failure = self._failed(spec, gate, exc)
                    try:
                        decision = self._decide(spec, st, failure, self._clock() - started)
                    except PolicydConfigError as auth_err:
                        auth_err.error = exc
                        raise auth_err from exc
                    if gate is not None:
                        decision = gate.decided(decision)
                    if decision.action is Action.RETRY:
                        if self._wait(self._before_sleep(spec, st, exc, failure, decision), cancel):
                            self._finish(spec, st, jpb.OUTCOME_ABANDONED)
                            raise RetryCancelled(
                                exc,
                                decision,
                                attempts=st.attempt,
                                context_id=st.begun_context(),
                                reason="cancelled by the caller",
                            ) from exc
                        continue
                    if decision.action is Action.FALL_BACK and fallback is not None:
                        hint = self._fallback_hint(st, exc, decision)
                        try:
                            result = fallback(hint)
                        except Exception:
                            self._finish(spec, st, jpb.OUTCOME_FAILED)
                            raise
                        self._finish(spec, st, jpb.OUTCOME_RESOLVED)
                        return result
                    self._finish(spec, st, jpb.OUTCOME_FAILED)
                    raise self._stopped(st, exc, decision) from exc
                self._succeeded(gate)
                self._finish(spec, st, jpb.OUTCOME_RESOLVED)
                return result
        except BaseException:
            if st.open():  # KeyboardInterrupt, SystemExit, a failing fallback, ...
                self._finish(spec, st, jpb.OUTCOME_ABANDONED)
            raise

    def retry(
        self,
        *,
        provider: str = "",
        model: str = "",
        key_id: str = "",
        operation: str = "",
        method: str = "",
        profile: str | None = None,
        journal: bool | None = None,
        deadline: Deadline | None = None,
        labels: Mapping[str, str] | None = None,
        safety: Safety | None = None,
        retry_fetch_errors: bool = False,
    ) -> Callable[[Callable[P, T]], Callable[P, T]]:
        """Decorate a function so that every call of it runs under :meth:`call`."""

        def decorate(f: Callable[P, T]) -> Callable[P, T]:
            @functools.wraps(f)
            def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
                return self.call(
                    lambda: f(*args, **kwargs),
                    provider=provider, model=model, key_id=key_id, operation=operation, method=method,
                    profile=profile, journal=journal, deadline=deadline, labels=labels, safety=safety,
                    retry_fetch_errors=retry_fetch_errors,
                )  # fmt: skip

            return wrapper

        return decorate

    def httpx2_client(
        self, *, inner: httpx2.BaseTransport | None = None, **options: Unpack[TransportOptions]
    ) -> httpx2.Client:
        """An ``httpx2.Client`` whose every request is one :meth:`call` (policyd_client.transport),
        for the SDKs that take one: ``OpenAI(http_client=pd.httpx2_client(provider="openai"),
        max_retries=0)``. ``inner`` sends the requests (default ``httpx2.HTTPTransport()``)."""
        from .transport import httpx2_client

        return httpx2_client(self, inner=inner, **options)

    def httpx_client(
        self, *, inner: httpx.BaseTransport | None = None, **options: Unpack[TransportOptions]
    ) -> httpx.Client:
        """As :meth:`httpx2_client`, an ``httpx.Client`` (the SDKs' releases built on httpx)."""
        from .transport import httpx_client

        return httpx_client(self, inner=inner, **options)

    # ---- the steps

    def _decide(self, spec: Spec, st: State, failure: pb.Failure, duration: float) -> Decision:
        decision = self._no_rpc_decision(st)
        if decision is not None:
            return decision
        if st.journal and not st.begun:
            timeout = self._rpc_timeout(st)
            if timeout is None:
                return _core.deadline_decision()
            if self._begin(spec, st, timeout):
                return self._fail_open(spec, st, failure, duration)  # the daemon is down: do not wait twice
        timeout = self._rpc_timeout(st)
        if timeout is None:
            return _core.deadline_decision()
        try:
            resp = self.policy.NextDelay(self._next_delay_request(spec, st, failure), timeout=timeout)
        except grpc.RpcError as err:
            return self._next_delay_failed(spec, st, failure, duration, err)
        return self._next_delay_answered(spec, st, failure, duration, resp)

    def _begin(self, spec: Spec, st: State, timeout: float) -> bool:
        """Begin the call's RetryContext; return True when the daemon is unreachable."""
        try:
            self.journal_service.BeginContext(_core.begin_request(spec, st), timeout=timeout)
        except grpc.RpcError as err:
            return self._begin_failed(st, err)
        st.begun = True
        return False

    def _finish(self, spec: Spec, st: State, outcome: jpb.Outcome) -> None:
        """End a journaled call's RetryContext: begin it if needed, record what is pending, finish.

        When the daemon does not answer, finishing is retried on a background
        thread (FINISH_RETRY_DELAYS), so that the caller waits at most one
        timeout and a run that ended while policyd was away is not left in
        progress.
        """
        if not self._unfinished(st):
            return
        if self._flush(spec, st, outcome, _core.finish_timeout(self.timeout, self._remaining(st))):
            return
        threading.Thread(target=self._retry_flush, args=(spec, st, outcome), name="policyd-finish", daemon=True).start()

    def _retry_flush(self, spec: Spec, st: State, outcome: jpb.Outcome) -> None:
        for delay in _core.FINISH_RETRY_DELAYS:
            if self._closing.wait(delay):
                return
            try:
                if self._flush(spec, st, outcome, self.timeout):
                    return
            except Exception as err:  # e.g. the channel closed meanwhile: never a traceback from this thread
                self._finish_broke(st, err)
                return
        self._finish_given_up(st)

    def _flush(self, spec: Spec, st: State, outcome: jpb.Outcome, timeout: float) -> bool:
        """Begin, record, finish; False when the daemon did not answer (every step is idempotent)."""
        try:
            if not st.begun:
                if self._begin(spec, st, timeout):
                    return False
                if not st.begun:
                    return True  # refused: the journal is off, or the context was
        except PolicydConfigError as e:
            return self._begin_refused(e)
        try:
            while st.pending:
                self.journal_service.RecordAttempt(st.pending[0], timeout=timeout)
                st.pending.pop(0)
            self.journal_service.FinishContext(self._finish_request(st, outcome), timeout=timeout)
        except grpc.RpcError as err:
            return self._finish_failed(st, err)
        return True

    def _park(self, gate: Gated, v: GateVerdict, cancel: threading.Event | None) -> GateVerdict:
        """Hold a parked first attempt (docs/clients.md, "Parking"): no attempt, no RPC, until a
        re-check at the target's next assignment, every second, or at the call's end admits or
        stops it; ``cancel`` ends the wait (RetryCancelled). on_retry sees it park and leave."""
        p = v.parked
        assert p is not None
        gate.parked(v)
        while v.action is GateAction.PARK:
            woken = threading.Event()
            gate.table.park_wait(gate.target, woken)
            end = time.monotonic() + max(0.0, min(p.draw_at, p.until) - self._clock())
            while not woken.is_set() and (left := end - time.monotonic()) > 0:
                if cancel is not None and cancel.is_set():
                    break
                woken.wait(min(left, 0.05) if cancel is not None else left)
            if cancel is not None and cancel.is_set():
                gate.table.park_cancelled(gate.target, p)
                raise _texts.gate_cancelled(gate.target)
            v = gate.resume(p)
        gate.parked(v)
        return v

    def _wait(self, delay: float, cancel: threading.Event | None) -> bool:
        """Sleep delay seconds; return True when cancel was set (at once, mid-sleep)."""
        if self._sleep is not None:
            if cancel is not None and cancel.is_set():
                return True
            self._sleep(delay)
            return cancel is not None and cancel.is_set()
        if cancel is None:
            time.sleep(delay)
            return False
        return cancel.wait(delay)
