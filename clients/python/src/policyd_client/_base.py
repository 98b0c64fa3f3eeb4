"""What the sync and asyncio clients share: their construction (address, security, defaults,
the fleet table) and every step of a call that does not wait: the call's spec, state and gate
target, the decisions made around the RPCs (the fail-open one, a deadline's, the fleet's), the
requests and what an answer or a failed RPC changes, the errors and hints a call ends with.
``Client`` and ``AsyncClient`` add their channel and stream and the waiting parts (the RPCs,
sleeps, parks and the caller's functions), in the same order, so that the two differ only where
one awaits and the other does not."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping

import grpc

from . import _auth, _core, _fleet, _stream, _texts
from ._core import Deadline, Safety, Spec, State
from ._gate import GateAction, GateVerdict, Parked
from ._gen.policyd.v1 import journal_pb2 as jpb
from ._gen.policyd.v1 import policy_pb2 as pb
from .decision import SOURCE_FAIL_OPEN, Action, Decision, FallbackHint, RetryEvent
from .errors import PolicydConfigError, RetryStopped
from .fail_open import FailOpenPolicy
from .failure import FailureMapper


class ClientBase:
    """The state and the non-blocking methods of :class:`~policyd_client.Client` and
    :class:`~policyd_client.AsyncClient`."""

    addr: str
    timeout: float
    client_id: str
    profile: str
    agent: str
    journal: bool
    labels: dict[str, str]
    fail_open: FailOpenPolicy
    failure_mapper: FailureMapper
    on_retry: Callable[[RetryEvent], None] | None
    fleet_gate: bool
    park_limit: float | None

    def _setup(
        self,
        addr: str | None,
        *,
        channel_given: bool,
        timeout: float,
        profile: str,
        agent: str | None,
        journal: bool,
        labels: Mapping[str, str] | None,
        fail_open: FailOpenPolicy | None,
        failure_mapper: FailureMapper | None,
        on_retry: Callable[[RetryEvent], None] | None,
        clock: Callable[[], float],
        logger: logging.Logger | None,
        token: str | None,
        tls: bool | None,
        tls_ca: str | None,
        tls_cert: str | None,
        tls_key: str | None,
        client_id: str | None,
        fleet_gate: bool,
        fleet_grace: float,
        park_limit: float | None,
    ) -> None:
        address = _core.resolve_addr(addr)
        self.addr = address.target
        if tls is None and address.tls:
            tls = True  # https://
        if channel_given and (token or (tls and not address.tls) or tls_ca or tls_cert or tls_key):
            raise ValueError("policyd: give token and TLS options or a channel, not both (the channel carries its own)")
        self._security = (
            _auth.Security()
            if channel_given
            else _auth.resolve(self.addr, token=token, tls=tls, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key)
        )
        self.timeout = timeout
        #: Sent with every NextDelay: the fleet's circuit breakers count distinct clients.
        self.client_id = _core.resolve_client_id(client_id)
        self.profile = profile
        self.agent = _core.program_agent() if agent is None else agent
        self.journal = journal
        self.labels = dict(labels or {})
        self.fail_open = fail_open or FailOpenPolicy()
        self.failure_mapper = _core.default_mapper(failure_mapper)
        self.on_retry = on_retry
        self._clock = clock
        self._log = logger or _core.log
        self._warn = _core.Warnings(self.addr, self._log)
        self._own_channel = not channel_given
        #: Whether first attempts go through the fleet gate.
        self.fleet_gate = bool(fleet_gate)
        #: How long a call without a deadline may wait parked in the fleet gate, seconds (None:
        #: 120; 0: parking off).
        self.park_limit = _fleet.check_park_limit(park_limit)
        self._fleet: _fleet.FleetTable | None = None
        if self.fleet_gate:
            self._fleet = _fleet.FleetTable(clock, _fleet.check_grace(fleet_grace))
        self._stream: _stream.Stream | None = None  # the client's Coordinate stream, once there is one
        self._stream_log = _stream.StreamLog(self.addr, self._log)  # one for every stream a client opens

    def observe_rate_limits(
        self,
        headers: Mapping[str, str] | Iterable[tuple[str, str]],
        *,
        provider: str,
        model: str = "",
        key_id: str = "",
    ) -> None:
        """Hand over the rate-limit headers of a successful response to provider/model/key_id.

        Only ``x-ratelimit-*`` and ``anthropic-ratelimit-*`` are kept (at most
        16, values of at most 64 bytes); the last set goes with the target's
        next report, so that policyd can pace the fleet to the provider's
        limits. ``headers``: a dict, httpx's or requests' headers, or pairs.
        No RPC (not a coroutine in :class:`~policyd_client.AsyncClient`);
        nothing happens without ``provider`` or with the gate off.
        """
        target = self._target(provider, model, key_id)
        if target is not None and self._fleet is not None:
            self._fleet.observe(target, headers)

    def _stream_settings(self) -> _stream.StreamSettings:
        """What the client's Coordinate stream sends, and its pace and log."""
        return _stream.StreamSettings(
            client_id=self.client_id,
            profile=self.profile,
            metadata=_fleet.stream_metadata(self._security.token),
            random=self.fail_open.random,
            log=self._stream_log,
        )

    def _target(self, provider: str, model: str, key_id: str) -> _fleet.Target | None:
        """The call's gate target, None when the gate is off (here or at the daemon) or there is no provider."""
        if self._fleet is None or self._fleet.disabled:
            return None
        return _fleet.target_of(provider, model, key_id)

    # ---- a call's steps that do not wait

    def _spec(
        self,
        provider: str,
        model: str,
        key_id: str,
        operation: str,
        method: str,
        profile: str | None,
        journal: bool | None,
        context_id: str | None,
        labels: Mapping[str, str] | None,
        safety: Safety | None,
        retry_fetch_errors: bool,
        continue_on_failed_api_call: bool | None,
    ) -> Spec:
        return Spec(
            provider=provider,
            model=model,
            key_id=key_id,
            operation=operation,
            method=method.upper(),
            profile=self.profile if profile is None else profile,
            journal=self.journal if journal is None else journal,
            agent=self.agent,
            labels={**self.labels, **(labels or {})},
            context_id=context_id,
            safety=safety,
            retry_fetch_errors=retry_fetch_errors,
            continue_on_failed_api_call=continue_on_failed_api_call,
            mapper=self.failure_mapper,
            client_id=self.client_id,
        )

    def _start(self, spec: Spec, deadline: Deadline | None, call: _fleet.GateCall) -> tuple[State, Gated | None]:
        """A call's state, and its side of the fleet gate (None: the call is not gated)."""
        st = _core.new_state(deadline, spec.journal, spec.context_id, self._clock(), time.time())
        target = self._target(spec.provider, spec.model, spec.key_id)
        fleet = self._fleet
        return st, (Gated(self, fleet, target, call) if target is not None and fleet is not None else None)

    def _remaining(self, st: State) -> float | None:
        return st.remaining(self._clock())

    def _failed(self, spec: Spec, gate: Gated | None, exc: BaseException) -> pb.Failure:
        """An attempt raised exc: its Failure, counted against the call's target."""
        failure = spec.failure(exc)
        if gate is not None:
            gate.table.record(gate.target, False)
        return failure

    def _succeeded(self, gate: Gated | None) -> None:
        """An attempt succeeded: counted; a half-open breaker's probe is reported at once."""
        if gate is not None and gate.table.record(gate.target, True) and self._stream is not None:
            self._stream.flush()  # a probe's answer: the fleet waits for it

    def _before_sleep(
        self, spec: Spec, st: State, exc: BaseException, failure: pb.Failure, decision: Decision
    ) -> float:
        """Log a retry and tell on_retry; return the delay to sleep (never past the deadline)."""
        delay = _core.bounded(decision.delay, self._remaining(st))
        _core.log_retry(self._log, spec, st.attempt, delay, failure, decision)
        if self.on_retry is not None:
            self.on_retry(RetryEvent(st.attempt, delay, exc, failure, decision, st.begun_context()))
        return delay

    @staticmethod
    def _fallback_hint(st: State, exc: Exception, decision: Decision) -> FallbackHint:
        return FallbackHint(
            kind=decision.fallback, reason=decision.fallback_reason or decision.stop_text,
            error=exc, decision=decision, attempts=st.attempt, context_id=st.context_id,
            provider=decision.fallback_provider, model=decision.fallback_model,
        )  # fmt: skip

    @staticmethod
    def _stopped(st: State, exc: Exception, decision: Decision) -> RetryStopped:
        """The error of a call that stops after attempt st.attempt (made after the context's finish)."""
        return RetryStopped(exc, decision, attempts=st.attempt, context_id=st.begun_context())

    # ---- deciding after a failed attempt, around the RPCs

    def _no_rpc_decision(self, st: State) -> Decision | None:
        """The decision made without asking (the attempt guard), or None to ask policyd."""
        st.failed = True
        return _core.attempts_decision() if st.attempt >= _core.MAX_ATTEMPTS else None

    def _rpc_timeout(self, st: State) -> float | None:
        """The next RPC's timeout, None when the caller's deadline has passed."""
        return _core.rpc_timeout(self.timeout, self._remaining(st))

    def _auth_error(self, method: str, err: BaseException) -> PolicydConfigError | None:
        return _auth.auth_error(self.addr, method, err, token_set=bool(self._security.token))

    def _fail_open(self, spec: Spec, st: State, failure: pb.Failure, duration: float) -> Decision:
        decision = self.fail_open.decide(failure, st.attempt, remaining=self._remaining(st), safety=spec.safety)
        if st.journal:
            st.pending.append(_core.record_request(spec, st, failure, decision, duration))
        return decision

    def _next_delay_request(self, spec: Spec, st: State, failure: pb.Failure) -> pb.NextDelayRequest:
        return _core.next_delay_request(spec, st, failure, self._clock())

    def _next_delay_failed(
        self, spec: Spec, st: State, failure: pb.Failure, duration: float, err: grpc.RpcError
    ) -> Decision:
        """NextDelay failed: raise a configuration error, else warn and fail open."""
        auth_err = self._auth_error("NextDelay", err)
        if auth_err is not None:
            raise auth_err from None  # a configuration error: failing open would hide it
        self._warn.daemon_failed(err)
        return self._fail_open(spec, st, failure, duration)

    def _next_delay_answered(
        self, spec: Spec, st: State, failure: pb.Failure, duration: float, resp: pb.NextDelayResponse
    ) -> Decision:
        """NextDelay answered: policyd is back (a broken stream reopens now); its decision."""
        self._warn.daemon_ok()
        if self._stream is not None:
            self._stream.daemon_answered()
        decision = Decision.from_proto(resp.decision)
        if st.journal and not decision.journaled:
            st.pending.append(_core.record_request(spec, st, failure, decision, duration))
        return decision

    # ---- the journal's RPCs

    def _begin_failed(self, st: State, err: grpc.RpcError) -> bool:
        """BeginContext failed: True when the daemon is unreachable (the call stays journaled, begun
        at the next failure or at the end); else the journal is off for the call, or a
        configuration error is raised."""
        if _core.is_outage(err):
            self._warn.daemon_failed(err)
            return True
        st.journal = False
        auth_err = self._auth_error("BeginContext", err)
        if auth_err is not None:
            raise auth_err from None
        self._warn.journal_failed("BeginContext", err)
        return False

    def _unfinished(self, st: State) -> bool:
        """Whether a journaled call's context still needs finishing; if so it counts as finished
        from now on (finishing it again does nothing)."""
        if not st.open():
            return False
        st.finished = True
        return True

    def _begin_refused(self, e: PolicydConfigError) -> bool:
        """Beginning the context at a call's end raised a configuration error: the call is over,
        so it is said, not raised in place of the call's outcome. True: nothing is left to send."""
        self._log.warning("policyd journal: %s", e)
        return True

    @staticmethod
    def _finish_request(st: State, outcome: jpb.Outcome) -> jpb.FinishContextRequest:
        return jpb.FinishContextRequest(context_id=st.context_id or "", outcome=outcome)

    def _finish_failed(self, st: State, err: grpc.RpcError) -> bool:
        """Recording or finishing failed: False when the daemon is away (to try again later)."""
        if _core.is_outage(err):
            self._log.debug("policyd journal: finishing %s: %s; trying again", st.context_id, _core.rpc_text(err))
            return False
        self._warn.journal_failed("finishing the context", err)
        return True

    def _finish_broke(self, st: State, err: Exception) -> None:
        """Finishing in the background raised (e.g. the channel closed meanwhile): said, and ended."""
        self._log.debug("policyd journal: finishing %s: %s", st.context_id, err)

    def _finish_given_up(self, st: State) -> None:
        self._log.warning(
            "policyd journal: gave up finishing context %s; policyd will mark it abandoned", st.context_id
        )


class Gated:
    """One call's side of the fleet gate: its target on the client's table, and the steps there
    that do not wait (the clients add the first call's wait, a hold's and a park's)."""

    __slots__ = ("_call", "_client", "table", "target")

    def __init__(
        self, client: ClientBase, table: _fleet.FleetTable, target: _fleet.Target, call: _fleet.GateCall
    ) -> None:
        self._client = client
        self.table = table
        self.target = target
        self._call = call  # its class and input tokens

    def first(self, st: State, can_fall_back: bool) -> GateVerdict:
        """Gate the call's first attempt (counted as admitted or shed, with its class and tokens)."""
        c = self._client
        return self.table.check(
            self.target, c._remaining(st), can_fall_back, c.fail_open.random(), c.park_limit, self._call
        )

    def retry(self, st: State) -> GateVerdict:
        """Gate a retry: an open breaker parks it until the fleet sees the provider back; a stopped
        key stops it."""
        return self.table.check_retry(self.target, self._client._remaining(st), self._client.park_limit)

    def resume(self, p: Parked) -> GateVerdict:
        """Check a parked call again."""
        return self.table.resume(self.target, p, self._client.fail_open.random())

    def parked(self, v: GateVerdict) -> None:
        """Report a parked call to on_retry (attempt 0): as it parks, and as it leaves."""
        on_retry = self._client.on_retry
        if on_retry is not None:
            t = self.target
            failure = pb.Failure(provider=t.provider, model=t.model, key_id=t.key_id)
            d = _texts.park_decision(t, v)
            on_retry(RetryEvent(0, d.delay, _texts.gate_error(t, v), failure, d, None))

    def retried(self) -> None:
        """Count a retry sent, with its input tokens."""
        self.table.retried(self.target, self._call.input_tokens)

    @staticmethod
    def retry_refused(v: GateVerdict) -> bool:
        """Whether the gate's verdict stops a retry (its call then ends with retry_stopped)."""
        return v.action in (GateAction.STOP, GateAction.FALL_BACK)

    def retry_stopped(self, st: State, v: GateVerdict, last_exc: Exception) -> RetryStopped:
        """The error of a call whose retry the gate stopped (made after the context's finish)."""
        d = _texts.gate_decision(self.target, dataclasses.replace(v, action=GateAction.STOP))
        return RetryStopped(last_exc, d, attempts=st.attempt - 1, context_id=st.begun_context())

    def decided(self, decision: Decision) -> Decision:
        """The decision after a failure, as the fleet sees it: a failure the fail-open policy
        decided is counted when the daemon's breakers count its type; and with policyd away the
        process's own budget limits retries, never first attempts."""
        if decision.source != SOURCE_FAIL_OPEN:
            return decision
        if decision.failure_type in _fleet.BREAKER_COUNTED:
            self.table.failed_locally(self.target)
        if decision.action is Action.RETRY and not self.table.allow_retry(self.target):
            return _texts.budget_stop(self.target, decision)
        return decision
