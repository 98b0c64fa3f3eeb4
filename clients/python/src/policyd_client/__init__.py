"""policyd_client — retry agent calls the way policyd says.

Wrap a call; the client turns its exception into a policyd ``Failure``, asks
the daemon's ``NextDelay`` what to do, sleeps and retries, stops with the
reason, or hands a fallback hint to your fallback function, and records it
all in the journal when asked. When the daemon is unreachable it falls back to
a small built-in policy and never turns a daemon outage into an agent outage.

    from policyd_client import Client

    client = Client()  # $POLICYD_ADDR, else 127.0.0.1:7433
    text = client.call(lambda: ask_llm(prompt), provider="openai", operation="chat")
"""

from typing import TYPE_CHECKING, Any

from ._core import DEFAULT_ADDR, DEFAULT_TIMEOUT, Deadline, Safety
from ._gen.policyd.v1 import journal_pb2, policy_pb2
from ._gen.policyd.v1.policy_pb2 import Cause, Failure
from .aio import AsyncClient
from .client import Client
from .decision import (
    SOURCE_FAIL_OPEN,
    SOURCE_FLEET_GATE,
    SOURCE_POLICYD,
    Action,
    Decision,
    FallbackHint,
    FleetState,
    RetryEvent,
)
from .errors import (
    FleetGateError,
    PolicydAuthError,
    PolicydClientError,
    PolicydConfigError,
    PolicydOptionsError,
    RetryCancelled,
    RetryStopped,
)
from .fail_open import FailOpenPolicy, retry_after
from .failure import FailureMapper, failure_from_exception, failure_from_response

if TYPE_CHECKING:
    from .transport import (
        AsyncPolicydTransport,
        PolicydTransport,
        TransportOptions,
        httpx2_async_client,
        httpx2_client,
        httpx_async_client,
        httpx_client,
    )

__version__ = "0.1.0"

# The transport's names, imported on first use: only its users load httpx (or httpx2).
_TRANSPORT = frozenset(
    {
        "AsyncPolicydTransport",
        "PolicydTransport",
        "TransportOptions",
        "httpx2_async_client",
        "httpx2_client",
        "httpx_async_client",
        "httpx_client",
    }
)


def __getattr__(name: str) -> Any:
    if name in _TRANSPORT:
        from . import transport

        return getattr(transport, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Action",
    "AsyncClient",
    "AsyncPolicydTransport",
    "Cause",
    "Client",
    "DEFAULT_ADDR",
    "DEFAULT_TIMEOUT",
    "Deadline",
    "Decision",
    "FailOpenPolicy",
    "Failure",
    "FailureMapper",
    "FallbackHint",
    "FleetGateError",
    "FleetState",
    "PolicydAuthError",
    "PolicydConfigError",
    "PolicydOptionsError",
    "PolicydClientError",
    "PolicydTransport",
    "RetryCancelled",
    "RetryEvent",
    "RetryStopped",
    "SOURCE_FAIL_OPEN",
    "SOURCE_FLEET_GATE",
    "SOURCE_POLICYD",
    "Safety",
    "TransportOptions",
    "failure_from_exception",
    "failure_from_response",
    "httpx2_async_client",
    "httpx2_client",
    "httpx_async_client",
    "httpx_client",
    "journal_pb2",
    "policy_pb2",
    "retry_after",
]
