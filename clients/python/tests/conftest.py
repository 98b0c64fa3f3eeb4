from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import grpc
import pytest
from harness import (
    Certs,
    CountingInterceptor,
    Daemon,
    FakeProvider,
    FakeServer,
    fakeprovider_bin,
    make_certs,
    policyd_bin,
    tokens_file,
)

from policyd_client import Client


@pytest.fixture(scope="session")
def binary() -> str:
    return policyd_bin()


@pytest.fixture(scope="session")
def daemon(binary: str) -> Iterator[Daemon]:
    """policyd without a journal."""
    d = Daemon(binary)
    yield d
    d.stop()


@pytest.fixture(scope="session")
def database_url() -> str:
    url = os.environ.get("TEST_DATABASE_URL", "")
    if not url:
        if os.environ.get("POLICYD_REQUIRE_JOURNAL"):
            pytest.fail("TEST_DATABASE_URL is not set (scripts/test.sh sets it or starts a cluster)")
        pytest.skip("TEST_DATABASE_URL is not set; run scripts/test.sh for the journal tests")
    return url


@pytest.fixture(scope="session")
def journal_daemon(binary: str, database_url: str) -> Iterator[Daemon]:
    """policyd with a PostgreSQL journal."""
    d = Daemon(binary, database_url=database_url)
    yield d
    d.stop()


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """A throwaway CA with a server and a client certificate (generated with openssl)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed: TLS tests skipped")
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="session")
def auth_daemon(binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """policyd with --auth-tokens (tenant acme, harness.TOKEN), in plaintext on loopback."""
    d = Daemon(binary, args=("--auth-tokens", tokens_file(tmp_path_factory.mktemp("tokens"))))
    yield d
    d.stop()


@pytest.fixture(scope="session")
def tls_daemon(binary: str, certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """policyd with --auth-tokens and TLS (no client certificate required)."""
    tokens = tokens_file(tmp_path_factory.mktemp("tokens"))
    d = Daemon(binary, args=("--auth-tokens", tokens, "--tls-cert", certs.server_cert, "--tls-key", certs.server_key))
    yield d
    d.stop()


@pytest.fixture(scope="session")
def mtls_daemon(binary: str, certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """policyd with --auth-tokens and mutual TLS."""
    tokens = tokens_file(tmp_path_factory.mktemp("tokens"))
    args = ("--auth-tokens", tokens, "--tls-cert", certs.server_cert, "--tls-key", certs.server_key,
            "--tls-client-ca", certs.ca)  # fmt: skip
    d = Daemon(binary, args=args)
    yield d
    d.stop()


@pytest.fixture(scope="session")
def fakeprovider_binary() -> str:
    return fakeprovider_bin()


@pytest.fixture
def provider(fakeprovider_binary: str) -> Iterator[FakeProvider]:
    """A fake OpenAI and Anthropic API without limits, new for each test (its counts start at 0)."""
    p = FakeProvider(fakeprovider_binary)
    yield p
    p.stop()


@pytest.fixture
def server() -> Iterator[FakeServer]:
    s = FakeServer()
    yield s
    s.close()


@pytest.fixture
def client(daemon: Daemon) -> Iterator[Client]:
    # A generous RPC timeout: these tests are about the daemon's answers, not fail-open.
    with Client(daemon.addr, timeout=10) as c:
        yield c


class Counted:
    def __init__(self, client: Client, interceptor: CountingInterceptor) -> None:
        self.client = client
        self.rpcs = interceptor.methods


@pytest.fixture
def counted(daemon: Daemon) -> Iterator[Counted]:
    """A client whose RPCs are counted by a channel interceptor."""
    interceptor = CountingInterceptor()
    channel = grpc.intercept_channel(grpc.insecure_channel(daemon.addr), interceptor)
    c = Client(daemon.addr, timeout=10, channel=channel)
    yield Counted(c, interceptor)
    channel.close()
