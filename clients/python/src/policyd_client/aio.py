"""The asyncio client: ``AsyncClient.call`` and the ``@AsyncClient.retry`` decorator."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import grpc
import grpc.aio

from . import _auth, _core, _fleet, _stream, _texts
from ._base import ClientBase
from ._core import Deadline, Safety, Spec, State, rpc_code
from ._gate import GRACE, GateAction, GateVerdict
from ._gen.policyd.v1 import fleet_pb2 as fpb
from ._gen.policyd.v1 import journal_pb2 as jpb
from ._gen.policyd.v1 import policy_pb2 as pb
from ._stubs import AsyncJournalStub, AsyncPolicyStub, async_fleet_stub, async_journal_stub, async_policy_stub
from .decision import SOURCE_FAIL_OPEN, Action, Decision, FallbackHint, RetryEvent
from .errors import PolicydConfigError, RetryStopped
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
        self._stream: _AsyncStream | None = None
        self._stream_log = _stream.StreamLog(self.addr, self._log)

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
        spec = Spec(
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
        st = _core.new_state(deadline, spec.journal, spec.context_id, self._clock(), time.time())
        target = self._target(spec.provider, spec.model, spec.key_id)
        fleet = self._fleet
        if target is not None and fleet is not None:
            stream = self._start_stream(fleet)
            if stream is not None:
                await stream.first_call(target, self._remaining(st))  # at most 100 ms, once per target
            v = fleet.check(
                target, self._remaining(st), fallback is not None, self.fail_open.random(), self.park_limit, gc
            )
            fn = fleet.in_flight_async(target, fn)  # each attempt counted in flight while it runs
            if v.action is GateAction.PARK:
                v = await self._park(fleet, target, v)
            if v.action is GateAction.WAIT:
                await self._sleep(v.wait)
            elif v.action is GateAction.FALL_BACK and fallback is not None:
                return await fallback(_texts.gate_fallback(target, v))
            elif v.action is not GateAction.ADMIT:
                stopped = _texts.gate_stopped(target, v)
                raise stopped from stopped.error
        try:
            last_exc: Exception | None = None
            while True:
                st.attempt += 1
                if st.attempt > 1 and target is not None and fleet is not None:
                    # A retry passes the gate too: an open breaker parks it until the fleet sees the
                    # provider back; a stopped key stops it.
                    rv = fleet.check_retry(target, self._remaining(st), self.park_limit)
                    if rv.action is GateAction.PARK:
                        rv = await self._park(fleet, target, rv)
                    if rv.action in (GateAction.STOP, GateAction.FALL_BACK) and last_exc is not None:
                        await self._finish(spec, st, jpb.OUTCOME_FAILED)
                        d = _texts.gate_decision(target, dataclasses.replace(rv, action=GateAction.STOP))
                        ctx = st.context_id if st.begun else None
                        raise RetryStopped(last_exc, d, attempts=st.attempt - 1, context_id=ctx) from last_exc
                    fleet.retried(target, gc.input_tokens)
                started = self._clock()
                try:
                    result = await fn()
                except Exception as exc:
                    last_exc = exc
                    failure = spec.failure(exc)
                    if target is not None and fleet is not None:
                        fleet.record(target, False)
                    try:
                        decision = await self._decide(spec, st, failure, self._clock() - started)
                    except PolicydConfigError as auth_err:
                        auth_err.error = exc
                        raise auth_err from exc
                    if (
                        decision.source == SOURCE_FAIL_OPEN
                        and decision.failure_type in _fleet.BREAKER_COUNTED
                        and target is not None
                        and fleet is not None
                    ):
                        fleet.failed_locally(target)
                    if (
                        decision.source == SOURCE_FAIL_OPEN
                        and decision.action is Action.RETRY
                        and target is not None
                        and fleet is not None
                        and not fleet.allow_retry(target)
                    ):
                        # policyd away: the process's own budget limits retries, never first attempts.
                        decision = _texts.budget_stop(target, decision)
                    if decision.action is Action.RETRY:
                        delay = _core.bounded(decision.delay, self._remaining(st))
                        _core.log_retry(self._log, spec, st.attempt, delay, failure, decision)
                        if self.on_retry is not None:
                            ctx = st.context_id if st.begun else None
                            self.on_retry(RetryEvent(st.attempt, delay, exc, failure, decision, ctx))
                        await self._sleep(delay)
                        continue
                    if decision.action is Action.FALL_BACK and fallback is not None:
                        hint = FallbackHint(
                            kind=decision.fallback, reason=decision.fallback_reason or decision.stop_text,
                            error=exc, decision=decision, attempts=st.attempt, context_id=st.context_id,
                            provider=decision.fallback_provider, model=decision.fallback_model,
                        )  # fmt: skip
                        try:
                            result = await fallback(hint)
                        except Exception:
                            await self._finish(spec, st, jpb.OUTCOME_FAILED)
                            raise
                        await self._finish(spec, st, jpb.OUTCOME_RESOLVED)
                        return result
                    await self._finish(spec, st, jpb.OUTCOME_FAILED)
                    ctx = st.context_id if st.begun else None
                    raise RetryStopped(exc, decision, attempts=st.attempt, context_id=ctx) from exc
                if target is not None and fleet is not None and fleet.record(target, True) and self._stream:
                    self._stream.flush()  # a probe's answer: the fleet waits for it
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

    def _start_stream(self, fleet: _fleet.FleetTable) -> _AsyncStream | None:
        """Start the Coordinate stream on the running loop, once (again after a loop it ran on ended)."""
        if self._stream is not None and self._stream.alive():
            return self._stream
        if fleet.disabled:
            return None
        self._stream = _AsyncStream(
            fleet,
            self._chan(),
            client_id=self.client_id,
            profile=self.profile,
            metadata=_fleet.stream_metadata(self._security.token),
            random=self.fail_open.random,
            log=self._stream_log,
        )
        return self._stream

    async def _decide(self, spec: Spec, st: State, failure: pb.Failure, duration: float) -> Decision:
        st.failed = True
        if st.attempt >= _core.MAX_ATTEMPTS:
            return _core.attempts_decision()
        if st.journal and not st.begun:
            timeout = _core.rpc_timeout(self.timeout, self._remaining(st))
            if timeout is None:
                return _core.deadline_decision()
            if await self._begin(spec, st, timeout):
                return self._fail_open(spec, st, failure, duration)  # the daemon is down: do not wait twice
        timeout = _core.rpc_timeout(self.timeout, self._remaining(st))
        if timeout is None:
            return _core.deadline_decision()
        try:
            resp = await self.policy.NextDelay(
                _core.next_delay_request(spec, st, failure, self._clock()), timeout=timeout
            )
        except grpc.aio.AioRpcError as err:
            auth_err = self._auth_error("NextDelay", err)
            if auth_err is not None:
                raise auth_err from None  # a configuration error: failing open would hide it
            self._warn.daemon_failed(err)
            return self._fail_open(spec, st, failure, duration)
        self._warn.daemon_ok()
        if self._stream is not None:
            self._stream.daemon_answered()
        decision = Decision.from_proto(resp.decision)
        if st.journal and not decision.journaled:
            st.pending.append(_core.record_request(spec, st, failure, decision, duration))
        return decision

    async def _begin(self, spec: Spec, st: State, timeout: float) -> bool:
        """Begin the call's RetryContext; return True when the daemon is unreachable."""
        try:
            await self.journal_service.BeginContext(_core.begin_request(spec, st), timeout=timeout)
        except grpc.aio.AioRpcError as err:
            if _core.is_outage(err):
                self._warn.daemon_failed(err)
                return True  # stays journaled: begun at the next failure or at the end
            st.journal = False
            auth_err = self._auth_error("BeginContext", err)
            if auth_err is not None:
                raise auth_err from None
            self._warn.journal_failed("BeginContext", err)
            return False
        st.begun = True
        return False

    async def _finish(self, spec: Spec, st: State, outcome: jpb.Outcome, timeout: float | None = None) -> None:
        """End a journaled call's RetryContext: begin it if needed, record what is pending, finish.

        When the daemon does not answer, finishing is retried in a background
        task (FINISH_RETRY_DELAYS; close() cancels it), so that the caller waits
        at most one timeout and a run that ended while policyd was away is not
        left in progress.
        """
        if not st.open():
            return
        st.finished = True
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
                self._log.debug("policyd journal: finishing %s: %s", st.context_id, err)
                return
        self._log.warning(
            "policyd journal: gave up finishing context %s; policyd will mark it abandoned", st.context_id
        )

    async def _flush(self, spec: Spec, st: State, outcome: jpb.Outcome, timeout: float) -> bool:
        """Begin, record, finish; False when the daemon did not answer (every step is idempotent)."""
        try:
            if not st.begun:
                if await self._begin(spec, st, timeout):
                    return False
                if not st.begun:
                    return True  # refused: the journal is off, or the context was
        except PolicydConfigError as e:  # the call itself is over: say it, do not replace its outcome
            self._log.warning("policyd journal: %s", e)
            return True
        try:
            while st.pending:
                await self.journal_service.RecordAttempt(st.pending[0], timeout=timeout)
                st.pending.pop(0)
            await self.journal_service.FinishContext(
                jpb.FinishContextRequest(context_id=st.context_id or "", outcome=outcome), timeout=timeout
            )
        except grpc.aio.AioRpcError as err:
            if _core.is_outage(err):
                self._log.debug("policyd journal: finishing %s: %s; trying again", st.context_id, _core.rpc_text(err))
                return False
            self._warn.journal_failed("finishing the context", err)
        return True

    async def _park(self, fleet: _fleet.FleetTable, target: _fleet.Target, v: GateVerdict) -> GateVerdict:
        """Hold a parked first attempt (docs/clients.md, "Parking"): no attempt, no RPC, until a
        re-check at the target's next assignment, every second, or at the call's end admits or
        stops it; cancelling the task ends the wait. on_retry sees it park and leave."""
        p = v.parked
        assert p is not None
        self._park_hook(target, v)
        while v.action is GateAction.PARK:
            woken = asyncio.Event()
            fleet.park_wait(target, woken)
            try:
                await asyncio.wait_for(woken.wait(), max(0.001, min(p.draw_at, p.until) - self._clock()))
            except asyncio.TimeoutError:
                pass
            except asyncio.CancelledError:
                fleet.park_cancelled(target, p)
                raise
            v = fleet.resume(target, p, self.fail_open.random())
        self._park_hook(target, v)
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


class _AsyncStream:
    """The Coordinate stream of an AsyncClient: one task on the loop that started it."""

    def __init__(
        self,
        table: _fleet.FleetTable,
        channel: grpc.aio.Channel,
        *,
        client_id: str,
        profile: str,
        metadata: tuple[tuple[str, str], ...] | None,
        random: Callable[[], float],
        log: _stream.StreamLog,
    ) -> None:
        self._table = table
        self._stub = async_fleet_stub(channel)
        self._hello = _stream.hello(client_id, profile)
        self._metadata = metadata
        self._random = random
        self._log = log
        self._loop = asyncio.get_running_loop()
        self._kick = asyncio.Event()  # send a report now
        self._wake = asyncio.Event()  # stop waiting out the reconnect backoff: policyd answers again
        self._reachable = True  # not known to be down: a first call may wait for its assignment
        self._task = self._loop.create_task(self._run(), name="policyd-fleet-stream")

    def flush(self) -> None:
        """Send the pending report now rather than at the next tick."""
        self._kick.set()

    async def first_call(self, target: _fleet.Target, remaining: float | None) -> None:
        """A target's first call: subscribe it at once and wait (briefly) for its assignment."""
        wait = _stream.first_call_wait(remaining)
        if wait <= 0 or not self._reachable or self._task.done():
            return
        answered = asyncio.Event()
        if self._table.subscribe(target, answered):
            self.flush()
            try:
                await asyncio.wait_for(answered.wait(), wait)
            except asyncio.TimeoutError:
                pass

    def alive(self) -> bool:
        """Running, or ended for good (the daemon has no fleet memory); not when its loop is gone."""
        return not self._loop.is_closed() and (not self._task.done() or self._table.disabled)

    async def close(self) -> None:
        if self._task.done() or self._loop.is_closed():
            return
        if asyncio.get_running_loop() is not self._loop:  # closed from another loop: cancel only
            self._loop.call_soon_threadsafe(self._task.cancel)
            return
        self._task.cancel()
        await asyncio.wait([self._task])  # raises only when close() itself is cancelled

    def daemon_answered(self) -> None:
        """A unary call got through: a broken stream reconnects now, not after its backoff."""
        if not self._reachable:
            self._wake.set()

    async def _run(self) -> None:
        backoff = _stream.Backoff(self._random)
        while True:
            self._table.resubscribe()
            err: BaseException | None = None
            call: Any = None
            try:
                call = self._stub.Coordinate(self._requests(), metadata=self._metadata)
                answered = False
                async for resp in call:
                    if not answered:
                        answered = True
                        self._reachable = True
                        backoff.reset()
                        self._log.up()
                    self._table.apply(resp)
            except grpc.RpcError as e:
                err = e
            except asyncio.CancelledError:
                if call is not None:
                    call.cancel()
                raise
            except Exception as e:  # a broken channel, a bad message: never the caller's problem
                err = e
            self._reachable = False
            self._table.release()
            if _stream.is_off(rpc_code(err) if err is not None else None):
                self._table.disable()
                self._log.off(err)
                return
            self._log.broke(err)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), backoff.next())
                backoff.reset()  # policyd answered a call: it is back
            except asyncio.TimeoutError:
                pass

    async def _requests(self) -> AsyncIterator[fpb.CoordinateRequest]:
        yield self._hello
        while True:
            self._kick.clear()
            try:
                msgs = self._table.reports()
            except Exception as e:  # never expected; the stream must not die of it
                self._log.logger.debug("policyd fleet stream: building a report failed: %s", e)
                msgs = []
            for m in msgs:
                yield m
            try:
                await asyncio.wait_for(self._kick.wait(), _stream.report_interval(self._random))
            except asyncio.TimeoutError:
                pass
