"""Bearer tokens and TLS for a daemon started with --auth-tokens or --tls-cert."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio

from ._core import CHANNEL_OPTIONS, caller_mistake, rpc_code
from .errors import PolicydAuthError, PolicydConfigError, PolicydOptionsError

#: The environment variables read when the matching keyword is None.
ENV_TOKEN = "POLICYD_TOKEN"
ENV_TLS_CA = "POLICYD_TLS_CA"
ENV_TLS_CERT = "POLICYD_TLS_CERT"
ENV_TLS_KEY = "POLICYD_TLS_KEY"


@dataclass(frozen=True)
class Security:
    """How the client reaches the daemon: the token and the TLS files' contents."""

    token: str = field(default="", repr=False)
    tls: bool = False
    root_certificates: bytes | None = field(default=None, repr=False)
    certificate_chain: bytes | None = field(default=None, repr=False)
    private_key: bytes | None = field(default=None, repr=False)

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self.root_certificates,
            private_key=self.private_key,
            certificate_chain=self.certificate_chain,
        )


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ValueError(f"policyd: cannot read the TLS {what} {path}: {e.strerror or e}") from None


def is_loopback(addr: str) -> bool:
    """Whether the gRPC target addr is on this machine: a loopback IP, localhost or a unix socket."""
    if addr.startswith(("unix:", "unix-abstract:")):
        return True
    for scheme in ("dns:///", "ipv4:", "ipv6:"):
        if addr.startswith(scheme):
            addr = addr[len(scheme) :]
    host = addr
    if addr.startswith("["):
        host = addr[1 : addr.find("]")] if "]" in addr else addr
    elif addr.count(":") == 1:
        host = addr.rsplit(":", 1)[0]
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve(
    addr: str,
    *,
    token: str | None,
    tls: bool | None,
    tls_ca: str | None,
    tls_cert: str | None,
    tls_key: str | None,
) -> Security:
    """Fill what the keywords leave as None from the environment and read the TLS files.

    Raises ValueError for a file that cannot be read, a certificate without its
    key, or a token that would go in plaintext to an address beyond loopback.
    """
    if token is None:
        token = os.environ.get(ENV_TOKEN, "")
    if tls_ca is None:
        tls_ca = os.environ.get(ENV_TLS_CA) or None
    if tls_cert is None and tls_key is None:
        tls_cert = os.environ.get(ENV_TLS_CERT) or None
        tls_key = os.environ.get(ENV_TLS_KEY) or None
    if tls is None:
        tls = bool(tls_ca or tls_cert or tls_key)
    if not tls:
        if token and not is_loopback(addr):
            raise ValueError(
                f"policyd: not sending the bearer token ({ENV_TOKEN}) in plaintext to {addr}, which is not a "
                f"loopback address: use TLS (tls=True, tls_ca=... or {ENV_TLS_CA})"
            )
        return Security(token=token)
    if bool(tls_cert) != bool(tls_key):
        raise ValueError(
            f"policyd: a TLS client certificate needs both the certificate and the key ({ENV_TLS_CERT}, {ENV_TLS_KEY})"
        )
    return Security(
        token=token,
        tls=True,
        root_certificates=_read(tls_ca, "CA file") if tls_ca else None,
        certificate_chain=_read(tls_cert, "client certificate") if tls_cert else None,
        private_key=_read(tls_key, "client key") if tls_key else None,
    )


class _Details(grpc.ClientCallDetails):
    def __init__(self, d: Any, metadata: tuple[tuple[str, str | bytes], ...]) -> None:
        self.method = d.method
        self.timeout = d.timeout
        self.metadata = metadata
        self.credentials = d.credentials
        self.wait_for_ready = d.wait_for_ready
        self.compression = getattr(d, "compression", None)


class BearerInterceptor(grpc.UnaryUnaryClientInterceptor):
    """Adds ``authorization: Bearer TOKEN`` to every unary call of a sync channel."""

    def __init__(self, token: str) -> None:
        self._value = "Bearer " + token

    def __repr__(self) -> str:
        return "BearerInterceptor(<token>)"

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        md = (*(details.metadata or ()), ("authorization", self._value))
        return continuation(_Details(details, md), request)


class AsyncBearerInterceptor(grpc.aio.UnaryUnaryClientInterceptor):
    """Adds ``authorization: Bearer TOKEN`` to every unary call of a grpc.aio channel."""

    def __init__(self, token: str) -> None:
        self._value = "Bearer " + token

    def __repr__(self) -> str:
        return "AsyncBearerInterceptor(<token>)"

    async def intercept_unary_unary(
        self, continuation: Callable[..., Awaitable[Any]], details: Any, request: Any
    ) -> Any:
        md = grpc.aio.Metadata(*(details.metadata or ()))
        md.add("authorization", self._value)
        new = grpc.aio.ClientCallDetails(
            details.method, details.timeout, md, details.credentials, details.wait_for_ready
        )
        return await continuation(new, request)


def sync_channel(addr: str, sec: Security) -> grpc.Channel:
    if sec.tls:
        ch = grpc.secure_channel(addr, sec.credentials(), options=CHANNEL_OPTIONS)
    else:
        ch = grpc.insecure_channel(addr, options=CHANNEL_OPTIONS)
    if sec.token:
        ch = grpc.intercept_channel(ch, BearerInterceptor(sec.token))
    return ch


def async_channel(addr: str, sec: Security) -> grpc.aio.Channel:
    interceptors = [AsyncBearerInterceptor(sec.token)] if sec.token else None
    if sec.tls:
        return grpc.aio.secure_channel(addr, sec.credentials(), options=CHANNEL_OPTIONS, interceptors=interceptors)
    return grpc.aio.insecure_channel(addr, options=CHANNEL_OPTIONS, interceptors=interceptors)


def auth_error(addr: str, method: str, err: BaseException, token_set: bool) -> PolicydConfigError | None:
    """The error to raise when the daemon's answer is a configuration error (refusal), else None.

    UNAUTHENTICATED is a PolicydAuthError; INVALID_ARGUMENT naming one of the
    call's own options (caller_mistake) a PolicydOptionsError.
    """
    code = rpc_code(err)
    details = getattr(err, "details", None)
    text = str(details() or "") if callable(details) else ""
    if code is grpc.StatusCode.UNAUTHENTICATED:
        return PolicydAuthError(addr, method, text, token_set=token_set)
    if code is not None and caller_mistake(code.name, text):
        return PolicydOptionsError(addr, method, text)
    return None
