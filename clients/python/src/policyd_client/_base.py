"""What the sync and asyncio clients share: their construction (address, security, defaults,
the fleet table) and the per-call state that does not wait (the call's spec and gate target,
the fail-open decision, the parked call's report). ``Client`` and ``AsyncClient`` add their
channel, stream and the waiting parts."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from . import _auth, _core, _fleet, _texts
from ._core import Safety, Spec, State
from ._gate import GateVerdict
from ._gen.policyd.v1 import policy_pb2 as pb
from .decision import Decision, RetryEvent
from .errors import PolicydConfigError
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

    def _target(self, provider: str, model: str, key_id: str) -> _fleet.Target | None:
        """The call's gate target, None when the gate is off (here or at the daemon) or there is no provider."""
        if self._fleet is None or self._fleet.disabled:
            return None
        return _fleet.target_of(provider, model, key_id)

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

    def _remaining(self, st: State) -> float | None:
        return st.remaining(self._clock())

    def _auth_error(self, method: str, err: BaseException) -> PolicydConfigError | None:
        return _auth.auth_error(self.addr, method, err, token_set=bool(self._security.token))

    def _fail_open(self, spec: Spec, st: State, failure: pb.Failure, duration: float) -> Decision:
        decision = self.fail_open.decide(failure, st.attempt, remaining=self._remaining(st), safety=spec.safety)
        if st.journal:
            st.pending.append(_core.record_request(spec, st, failure, decision, duration))
        return decision

    def _park_hook(self, target: _fleet.Target, v: GateVerdict) -> None:
        """Report a parked call to on_retry (attempt 0): as it parks, and as it leaves."""
        if self.on_retry is not None:
            failure = pb.Failure(provider=target.provider, model=target.model, key_id=target.key_id)
            d = _texts.park_decision(target, v)
            self.on_retry(RetryEvent(0, d.delay, _texts.gate_error(target, v), failure, d, None))
