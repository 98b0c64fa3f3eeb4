"""The exceptions the client raises when it stops retrying."""

from __future__ import annotations

from .decision import Action, Decision

__all__ = [
    "FleetGateError",
    "PolicydAuthError",
    "PolicydClientError",
    "PolicydConfigError",
    "PolicydOptionsError",
    "RetryStopped",
    "RetryCancelled",
]


class PolicydClientError(Exception):
    """The base of every exception this package raises."""


class RetryStopped(PolicydClientError):
    """The operation failed and will not be retried.

    Raised ``from`` the last attempt's exception, which is also ``error``.
    ``decision`` is why (the daemon's, or the fail-open policy's),
    ``recovery_action`` what the user or the model should do about it.
    """

    def __init__(
        self,
        error: BaseException,
        decision: Decision | None,
        *,
        attempts: int,
        context_id: str | None = None,
        reason: str = "",
    ) -> None:
        self.error = error
        self.decision = decision
        self.attempts = attempts
        self.context_id = context_id
        self.reason = reason or (_why(decision) if decision else "stopped")
        super().__init__(self._text())

    @property
    def recovery_action(self) -> str:
        """What to do about the failure; "" when nothing was said."""
        return self.decision.recovery_action if self.decision else ""

    def _text(self) -> str:
        err = f"{type(self.error).__name__}: {self.error}".rstrip(": ")
        s = f"{err} (stopped after {self.attempts} attempt{'s' if self.attempts != 1 else ''}: {self.reason})"
        if self.recovery_action and self.recovery_action not in self.reason:
            s += f" {self.recovery_action}"
        return s


def _why(d: Decision) -> str:
    if d.action is Action.FALL_BACK:
        # Not "fall back (...)": the call did not fall back, it stopped.
        rest = (d.fallback_reason or d.stop_text or d.reason or "no reason given") + d.explain_tail()
        return f"policyd advised a fallback to {d.fallback_target()}, and the call has no fallback function: {rest}"
    return d.explain()


class RetryCancelled(RetryStopped):
    """The caller cancelled the operation (its ``cancel`` event was set)."""


class PolicydConfigError(PolicydClientError):
    """The daemon refused the client's configuration: its credentials, or a call's own options.

    Not an outage, so the client does not fail open on it (which would hide it
    behind retries that look fine and a journal that stays empty): ``call``
    raises it ``from`` the attempt's exception (also ``error``). ``addr`` is
    the daemon's address, ``method`` the refused RPC and ``details`` the
    daemon's message.
    """

    addr: str
    method: str
    details: str
    error: BaseException | None


class PolicydOptionsError(PolicydConfigError):
    """The daemon answered INVALID_ARGUMENT to a call's own options.

    An unknown profile, a ``context_id`` that is not a UUID, too many labels:
    ``details`` names the field, e.g. ``profile: unknown profile "web_fech";
    known: agent_cli, default, task_runner, web_fetch``.
    """

    def __init__(self, addr: str, method: str, details: str) -> None:
        self.addr = addr
        self.method = method
        self.details = details
        self.error = None
        super().__init__(f"policyd at {addr} refused {method}: INVALID_ARGUMENT: {details}")


class PolicydAuthError(PolicydConfigError):
    """The daemon answered UNAUTHENTICATED: no token, an unknown one, or no valid client certificate.

    A configuration error, not an outage, so the client does not fail open on
    it: ``call`` raises this ``from`` the attempt's exception (also ``error``)
    instead of deciding with the built-in policy. ``method`` is the refused RPC,
    ``details`` the daemon's message (it never contains the token), and
    ``token_set`` whether a token was sent.
    """

    def __init__(self, addr: str, method: str, details: str, *, token_set: bool) -> None:
        self.addr = addr
        self.method = method
        self.details = details
        self.token_set = token_set
        self.error: BaseException | None = None
        if token_set:
            hint = "the token sent (POLICYD_TOKEN or token=) is not in the daemon's --auth-tokens file"
        else:
            hint = "set POLICYD_TOKEN (or token=) to a token of the daemon's --auth-tokens file"
        super().__init__(f"policyd at {addr} refused {method}: UNAUTHENTICATED: {details}; {hint}")


class FleetGateError(PolicydClientError):
    """The fleet gate did not send a call's first attempt (docs/clients.md, "The fleet gate").

    Not raised by itself: it is the ``error`` of the :class:`RetryStopped`
    (``attempts`` 0) a gated call raises, and of the :class:`FallbackHint` its
    fallback function gets. ``provider``, ``model`` and ``key_id`` name the
    target; ``stop_reason`` is ``FLEET_STOP``, ``CIRCUIT_OPEN``, ``FLEET_SHED``,
    ``DEADLINE`` or ``RETRY_BUDGET_EXHAUSTED`` ("" when a wait was cancelled);
    ``reason`` says why in a sentence, with the assignment's reason.
    """

    def __init__(self, provider: str, model: str, key_id: str, *, stop_reason: str, reason: str) -> None:
        self.provider = provider
        self.model = model
        self.key_id = key_id
        self.stop_reason = stop_reason
        self.reason = reason
        what = f"{provider}/{model}" if model else provider
        super().__init__(f"the fleet gate did not send the first attempt to {what} ({stop_reason or 'cancelled'})")
