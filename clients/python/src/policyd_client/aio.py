"""The asyncio client: ``AsyncClient.call`` and the ``@AsyncClient.retry`` decorator."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import grpc
import grpc.aio

from . import _auth, _core, _fleet, _stream, _texts
from ._base import ClientBase, Gated
from ._core import Deadline, Safety, Spec, State
from ._gate import GRACE, GateAction, GateVerdict
from ._gen.policyd.v1 import journal_pb2 as jpb
from ._gen.policyd.v1 import policy_pb2 as pb
from ._stubs import AsyncJournalStub, AsyncPolicyStub, async_journal_stub, async_policy_stub
from .decision import Action, Decision, FallbackHint, RetryEvent
from .errors import PolicydConfigError
from .fail_open import FailOpenPolicy
from .failure import FailureMapper

if TYPE_CHECKING:
    import httpx
    import httpx2
    from typing_extensions import Unpack

    from .transport import TransportOptions

__all__ = ["AsyncClient"]

T = TypeVar("T")
P = ParamSpec("P")

# How long a cancelled call may spend telling the journal it was abandoned.
_ABANDON_TIMEOUT = 0.2


class AsyncClient(ClientBase):
    """Run coroutines under policyd's retry policy, on grpc.aio.

    The same options and behaviour as :class:`~policyd_client.Client`, with
    asyncio's own cancellation: cancelling the task that awaits :meth:`call`
    stops a sleep at once (``asyncio.CancelledError`` propagates, and a
    journaled context is finished ABANDONED). ``sleep`` defaults to
    ``asyncio.sleep``. The channel is opened on first use, inside the running
    event loop, so use a client within one loop; close it with
    ``await client.close()`` or ``async with``. The fleet gate's Coordinate
    stream (``fleet_gate``, ``fleet_grace``) is a task on that loop, started
    by the first call that names a provider and cancelled by ``close()``.
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
        sleep: Callable[[float], Awaitable[None]] | None = None,
        channel: grpc.aio.Channel | None = None,
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
        self._sleep = sleep or asyncio.sleep
        self._channel = channel
        self._finishing: set[asyncio.Future[None]] = set()  # background finishing, cancelled by close()
        self._policy: AsyncPolicyStub | None = None
        self._journal: AsyncJournalStub | None = None
        self._stream: _stream.AsyncStream | None = None

    def _chan(self) -> grpc.aio.Channel:
        if self._channel is None:
            self._channel = _auth.async_channel(self.addr, self._security)
        return self._channel

    @property
    def policy(self) -> AsyncPolicyStub:
        """The generated PolicyService stub (grpc.aio), for calls the client does not wrap."""
        if self._policy is None:
            self._policy = async_policy_stub(self._chan())
        return self._policy

    @property
    def journal_service(self) -> AsyncJournalStub:
        """The generated JournalService stub (grpc.aio): GetContext, GetErrorReport, ..."""
        if self._journal is None:
            self._journal = async_journal_stub(self._chan())
        return self._journal

    async def close(self) -> None:
        """Close the fleet stream, and the channel the client opened (not one it was given).

        Journal contexts still being finished in the background (policyd was
        away when their calls ended) are left for policyd to mark abandoned.
        """
        for task in list(self._finishing):
            task.cancel()
        if self._stream is not None:
            stream, self._stream = self._stream, None
            await stream.close()
        if self._own_channel and self._channel is not None:
            await self._channel.close()
            self._channel = None
            self._policy = self._journal = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def call(
        self,
        fn: Callable[[], Awaitable[T]],
        *,
        provider: str = "",
        model: str = "",
        key_id: str = "",
        operation: str = "",
        method: str = "",
        profile: str | None = None,
        journal: bool | None = None,
        fallback: Callable[[FallbackHint], Awaitable[T]] | None = None,
        deadline: Deadline | None = None,
        context_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        safety: Safety | None = None,
        retry_fetch_errors: bool = False,
        continue_on_failed_api_call: bool | None = None,
        priority: _fleet.Priority = "interactive",
        input_tokens: int = 0,
    ) -> T:
        """Await ``fn()`` until it succeeds or policyd says stop; return its result.

        As :meth:`policyd_client.Client.call`, with an async ``fn`` and
        ``fallback``; cancel the awaiting task instead of passing an event.
        """
        gc = _fleet.gate_call(priority, input_tokens)
        spec = self._spec(
            provider, model, key_id, operation, method, profile, journal, context_id, labels, safety,
            retry_fetch_errors, continue_on_failed_api_call,
        )  # fmt: skip
        st, gate = self._start(spec, deadline, gc)
        if gate is not None:
            stream = self._start_stream(gate.table)
            if stream is not None:
                await stream.first_call(gate.target, self._remaining(st))  # at most 100 ms, once per target
            v = gate.first(st, fallback is not None)
            fn = gate.table.in_flight_async(gate.target, fn)  # each attempt counted in flight while it runs
            if v.action is GateAction.PARK:
                v = await self._park(gate, v)
            if v.action is GateAction.WAIT:
                await self._sleep(v.wait)
            elif v.action is GateAction.FALL_BACK and fallback is not None:
                return await fallback(_texts.gate_fallback(gate.target, v))
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
                        rv = await self._park(gate, rv)
                    if last_exc is not None and gate.retry_refused(rv):
                        await self._finish(spec, st, jpb.OUTCOME_FAILED)
                        raise gate.retry_stopped(st, rv, last_exc) from last_exc
                    gate.retried()
                started = self._clock()
                try:
                    result = await fn()
                except Exception as exc:
                    last_exc = exc
                    failure = self._failed(spec, gate, exc)
                    try:
                        decision = await self._decide(spec, st, failure, self._clock() - started)
                    except PolicydConfigError as auth_err:
                        auth_err.error = exc
                        raise auth_err from exc
                    if gate is not None:
                        decision = gate.decided(decision)
                    if decision.action is Action.RETRY:
                        await self._sleep(self._before_sleep(spec, st, exc, failure, decision))
                        continue
                    if decision.action is Action.FALL_BACK and fallback is not None:
                        hint = self._fallback_hint(st, exc, decision)
                        try:
                            result = await fallback(hint)
                        except Exception:
                            await self._finish(spec, st, jpb.OUTCOME_FAILED)
                            raise
                        await self._finish(spec, st, jpb.OUTCOME_RESOLVED)
                        return result
                    await self._finish(spec, st, jpb.OUTCOME_FAILED)
                    raise self._stopped(st, exc, decision) from exc
                self._succeeded(gate)
                await self._finish(spec, st, jpb.OUTCOME_RESOLVED)
                return result
        except BaseException:
            if st.open():  # cancelled, a failing fallback, ...
                await self._abandon(spec, st)
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
    ) -> Callable[[Callable[P, Awaitable[T]]], Callable[P, Coroutine[Any, Any, T]]]:
        """Decorate an async function so that every call of it runs under :meth:`call`."""

        def decorate(f: Callable[P, Awaitable[T]]) -> Callable[P, Coroutine[Any, Any, T]]:
            @functools.wraps(f)
            async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
                return await self.call(
                    lambda: f(*args, **kwargs),
                    provider=provider, model=model, key_id=key_id, operation=operation, method=method,
                    profile=profile, journal=journal, deadline=deadline, labels=labels, safety=safety,
                    retry_fetch_errors=retry_fetch_errors,
                )  # fmt: skip

            return wrapper

        return decorate

    def httpx2_async_client(
        self, *, inner: httpx2.AsyncBaseTransport | None = None, **options: Unpack[TransportOptions]
    ) -> httpx2.AsyncClient:
        """An ``httpx2.AsyncClient`` whose every request is one :meth:`call` (policyd_client.transport):
        ``AsyncAnthropic(http_client=pd.httpx2_async_client(provider="anthropic"), max_retries=0)``.
        ``inner`` sends the requests (default ``httpx2.AsyncHTTPTransport()``)."""
        from .transport import httpx2_async_client

        return httpx2_async_client(self, inner=inner, **options)

    def httpx_async_client(
        self, *, inner: httpx.AsyncBaseTransport | None = None, **options: Unpack[TransportOptions]
    ) -> httpx.AsyncClient:
        """As :meth:`httpx2_async_client`, an ``httpx.AsyncClient`` (the SDKs' releases built on httpx)."""
        from .transport import httpx_async_client

        return httpx_async_client(self, inner=inner, **options)

    # ---- the steps

    def _start_stream(self, fleet: _fleet.FleetTable) -> _stream.AsyncStream | None:
        """Start the Coordinate stream on the running loop, once (again after a loop it ran on ended)."""
        if self._stream is not None and self._stream.alive():
            return self._stream
        if fleet.disabled:
            return None
        self._stream = _stream.AsyncStream(fleet, self._chan(), self._stream_settings())
        return self._stream

    async def _decide(self, spec: Spec, st: State, failure: pb.Failure, duration: float) -> Decision:
        decision = self._no_rpc_decision(st)
        if decision is not None:
            return decision
        if st.journal and not st.begun:
            timeout = self._rpc_timeout(st)
            if timeout is None:
                return _core.deadline_decision()
            if await self._begin(spec, st, timeout):
                return self._fail_open(spec, st, failure, duration)  # the daemon is down: do not wait twice
        timeout = self._rpc_timeout(st)
        if timeout is None:
            return _core.deadline_decision()
        try:
            resp = await self.policy.NextDelay(self._next_delay_request(spec, st, failure), timeout=timeout)
        except grpc.aio.AioRpcError as err:
            return self._next_delay_failed(spec, st, failure, duration, err)
        return self._next_delay_answered(spec, st, failure, duration, resp)

    async def _begin(self, spec: Spec, st: State, timeout: float) -> bool:
        """Begin the call's RetryContext; return True when the daemon is unreachable."""
        try:
            await self.journal_service.BeginContext(_core.begin_request(spec, st), timeout=timeout)
        except grpc.aio.AioRpcError as err:
            return self._begin_failed(st, err)
        st.begun = True
        return False

    async def _finish(self, spec: Spec, st: State, outcome: jpb.Outcome, timeout: float | None = None) -> None:
        """End a journaled call's RetryContext: begin it if needed, record what is pending, finish.

        When the daemon does not answer, finishing is retried in a background
        task (FINISH_RETRY_DELAYS; close() cancels it), so that the caller waits
        at most one timeout and a run that ended while policyd was away is not
        left in progress.
        """
        if not self._unfinished(st):
            return
        if timeout is None:
            timeout = _core.finish_timeout(self.timeout, self._remaining(st))
        if await self._flush(spec, st, outcome, timeout):
            return
        task = asyncio.ensure_future(self._retry_flush(spec, st, outcome))
        self._finishing.add(task)
        task.add_done_callback(self._finishing.discard)

    async def _retry_flush(self, spec: Spec, st: State, outcome: jpb.Outcome) -> None:
        for delay in _core.FINISH_RETRY_DELAYS:
            await asyncio.sleep(delay)
            try:
                if await self._flush(spec, st, outcome, self.timeout):
                    return
            except Exception as err:  # e.g. the channel closed meanwhile: never an unretrieved task error
                self._finish_broke(st, err)
                return
        self._finish_given_up(st)

    async def _flush(self, spec: Spec, st: State, outcome: jpb.Outcome, timeout: float) -> bool:
        """Begin, record, finish; False when the daemon did not answer (every step is idempotent)."""
        try:
            if not st.begun:
                if await self._begin(spec, st, timeout):
                    return False
                if not st.begun:
                    return True  # refused: the journal is off, or the context was
        except PolicydConfigError as e:
            return self._begin_refused(e)
        try:
            while st.pending:
                await self.journal_service.RecordAttempt(st.pending[0], timeout=timeout)
                st.pending.pop(0)
            await self.journal_service.FinishContext(self._finish_request(st, outcome), timeout=timeout)
        except grpc.aio.AioRpcError as err:
            return self._finish_failed(st, err)
        return True

    async def _park(self, gate: Gated, v: GateVerdict) -> GateVerdict:
        """Hold a parked first attempt (docs/clients.md, "Parking"): no attempt, no RPC, until a
        re-check at the target's next assignment, every second, or at the call's end admits or
        stops it; cancelling the task ends the wait. on_retry sees it park and leave."""
        p = v.parked
        assert p is not None
        gate.parked(v)
        while v.action is GateAction.PARK:
            woken = asyncio.Event()
            gate.table.park_wait(gate.target, woken)
            try:
                await asyncio.wait_for(woken.wait(), max(0.001, min(p.draw_at, p.until) - self._clock()))
            except asyncio.TimeoutError:
                pass
            except asyncio.CancelledError:
                gate.table.park_cancelled(gate.target, p)
                raise
            v = gate.resume(p)
        gate.parked(v)
        return v

    async def _abandon(self, spec: Spec, st: State) -> None:
        """Finish a context ABANDONED, briefly, even from a cancelled task."""
        task = asyncio.ensure_future(self._finish(spec, st, jpb.OUTCOME_ABANDONED, _ABANDON_TIMEOUT))
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            pass  # cancelled again: the shielded finish goes on by itself
        except Exception as err:  # never hide the original exception
            self._log.debug("policyd journal: abandoning %s failed: %s", st.context_id, err)
