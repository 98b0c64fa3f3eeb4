"""The asyncio client: ``AsyncClient.call`` and the ``@AsyncClient.retry`` decorator."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, ParamSpec, TypeVar

import grpc
import grpc.aio

from . import _auth, _core
from ._core import Deadline, Safety, Spec, State
from ._gen.policyd.v1 import journal_pb2 as jpb
from ._gen.policyd.v1 import policy_pb2 as pb
from ._stubs import AsyncJournalStub, AsyncPolicyStub, async_journal_stub, async_policy_stub
from .decision import Action, Decision, FallbackHint, RetryEvent
from .errors import PolicydAuthError, RetryStopped
from .fail_open import FailOpenPolicy
from .failure import FailureMapper

__all__ = ["AsyncClient"]

T = TypeVar("T")
P = ParamSpec("P")

# How long a cancelled call may spend telling the journal it was abandoned.
_ABANDON_TIMEOUT = 0.2


class AsyncClient:
    """Run coroutines under policyd's retry policy, on grpc.aio.

    The same options and behaviour as :class:`~policyd_client.Client`, with
    asyncio's own cancellation: cancelling the task that awaits :meth:`call`
    stops a sleep at once (``asyncio.CancelledError`` propagates, and a
    journaled context is finished ABANDONED). ``sleep`` defaults to
    ``asyncio.sleep``. The channel is opened on first use, inside the running
    event loop, so use a client within one loop; close it with
    ``await client.close()`` or ``async with``.
    """

    def __init__(
        self,
        addr: str | None = None,
        *,
        timeout: float = _core.DEFAULT_TIMEOUT,
        profile: str = "",
        agent: str = "",
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
    ) -> None:
        self.addr = _core.resolve_addr(addr)
        if channel is not None and (token or tls or tls_ca or tls_cert or tls_key):
            raise ValueError("policyd: give token and TLS options or a channel, not both (the channel carries its own)")
        self._security = (
            _auth.Security()
            if channel is not None
            else _auth.resolve(self.addr, token=token, tls=tls, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key)
        )
        self.timeout = timeout
        #: Sent with every NextDelay: the fleet's circuit breakers count distinct clients.
        self.client_id = _core.resolve_client_id(client_id)
        self.profile = profile
        self.agent = agent
        self.journal = journal
        self.labels = dict(labels or {})
        self.fail_open = fail_open or FailOpenPolicy()
        self.failure_mapper = _core.default_mapper(failure_mapper)
        self.on_retry = on_retry
        self._clock = clock
        self._sleep = sleep or asyncio.sleep
        self._log = logger or _core.log
        self._warn = _core.Warnings(self.addr, self._log)
        self._own_channel = channel is None
        self._channel = channel
        self._policy: AsyncPolicyStub | None = None
        self._journal: AsyncJournalStub | None = None

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
        """Close the channel the client opened (not one it was given)."""
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
    ) -> T:
        """Await ``fn()`` until it succeeds or policyd says stop; return its result.

        As :meth:`policyd_client.Client.call`, with an async ``fn`` and
        ``fallback``; cancel the awaiting task instead of passing an event.
        """
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
        try:
            while True:
                st.attempt += 1
                started = self._clock()
                try:
                    result = await fn()
                except Exception as exc:
                    failure = spec.failure(exc)
                    try:
                        decision = await self._decide(spec, st, failure, self._clock() - started)
                    except PolicydAuthError as auth_err:
                        auth_err.error = exc
                        raise auth_err from exc
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

    # ---- the steps

    def _remaining(self, st: State) -> float | None:
        return st.remaining(self._clock())

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
        decision = Decision.from_proto(resp.decision)
        if st.journal and not decision.journaled:
            st.pending.append(_core.record_request(spec, st, failure, decision, duration))
        return decision

    def _auth_error(self, method: str, err: BaseException) -> PolicydAuthError | None:
        return _auth.auth_error(self.addr, method, err, token_set=bool(self._security.token))

    def _fail_open(self, spec: Spec, st: State, failure: pb.Failure, duration: float) -> Decision:
        decision = self.fail_open.decide(failure, st.attempt, remaining=self._remaining(st), safety=spec.safety)
        if st.journal:
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
        """End a journaled call's RetryContext: begin it if needed, record what is pending, finish."""
        if not st.open():
            return
        st.finished = True
        if timeout is None:
            timeout = _core.finish_timeout(self.timeout, self._remaining(st))
        try:
            if not st.begun and (await self._begin(spec, st, timeout) or not st.begun):
                return
        except PolicydAuthError as e:  # the call itself is over: say it, do not replace its outcome
            self._log.warning("policyd journal: %s", e)
            return
        try:
            for req in st.pending:
                await self.journal_service.RecordAttempt(req, timeout=timeout)
            st.pending.clear()
            await self.journal_service.FinishContext(
                jpb.FinishContextRequest(context_id=st.context_id or "", outcome=outcome), timeout=timeout
            )
        except grpc.aio.AioRpcError as err:
            self._warn.journal_failed("finishing the context", err)

    async def _abandon(self, spec: Spec, st: State) -> None:
        """Finish a context ABANDONED, briefly, even from a cancelled task."""
        task = asyncio.ensure_future(self._finish(spec, st, jpb.OUTCOME_ABANDONED, _ABANDON_TIMEOUT))
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            pass  # cancelled again: the shielded finish goes on by itself
        except Exception as err:  # never hide the original exception
            self._log.debug("policyd journal: abandoning %s failed: %s", st.context_id, err)
