"""failure_from_exception with real exceptions from real requests to a local server."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import grpc
import httpx
import requests
from harness import FakeServer, Reply, closed_port_addr

from policyd_client import Failure, failure_from_exception, failure_from_response, policy_pb2


def names(f: Failure) -> list[str]:
    return [f.error_name] + [c.name for c in f.causes]


def codes(f: Failure) -> list[str]:
    return [f.error_code] + [c.code for c in f.causes]


def raised(fn: object) -> BaseException:
    try:
        fn()  # type: ignore[operator]
    except BaseException as e:  # noqa: BLE001
        return e
    raise AssertionError("no exception")


RATE_LIMIT_BODY = json.dumps(
    {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}
)


def test_httpx_status_error(server: FakeServer) -> None:
    url = server.script("/x", Reply(429, headers={"Retry-After": "7", "X-Thing": "a"}, body=RATE_LIMIT_BODY))
    exc = raised(lambda: httpx.get(url).raise_for_status())
    f = failure_from_exception(exc, provider="openai", operation="chat")
    assert f.error_name == "HTTPStatusError"
    assert f.http_status == 429
    assert f.headers["retry-after"] == "7"
    assert f.headers["x-thing"] == "a"
    assert "rate_limit_exceeded" in f.body
    assert f.method == "GET"
    assert (f.provider, f.operation) == ("openai", "chat")


def test_httpx_dropped_connection(server: FakeServer) -> None:
    url = server.script("/x", Reply(drop="close"))
    f = failure_from_exception(raised(lambda: httpx.get(url)))
    assert f.error_name == "RemoteProtocolError"
    assert f.http_status == 0
    assert f.method == "GET"  # from the request the error carries


def test_httpx_read_timeout(server: FakeServer) -> None:
    url = server.script("/x", Reply(delay=2))
    f = failure_from_exception(raised(lambda: httpx.get(url, timeout=0.2)))
    assert f.error_name == "ReadTimeout"
    assert names(f) == ["ReadTimeout", "ReadTimeout", "TimeoutError"]  # httpx, httpcore, the socket


def test_httpx_connection_refused() -> None:
    f = failure_from_exception(raised(lambda: httpx.get(f"http://{closed_port_addr()}/")))
    assert f.error_name == "ConnectError"
    assert "ECONNREFUSED" in codes(f)
    assert "ConnectionRefusedError" in names(f)


def test_requests_http_error(server: FakeServer) -> None:
    url = server.script("/x", Reply(503, headers={"retry-after": "2"}, body="busy"))
    exc = raised(lambda: requests.post(url, data="x", timeout=5).raise_for_status())
    f = failure_from_exception(exc)
    assert f.error_name == "HTTPError"
    assert (f.http_status, f.body, f.method) == (503, "busy", "POST")
    assert f.headers["retry-after"] == "2"


def test_requests_connection_refused_walks_wrapped_errors() -> None:
    f = failure_from_exception(raised(lambda: requests.get(f"http://{closed_port_addr()}/", timeout=5)))
    assert f.error_name == "ConnectionError"
    # requests wraps urllib3's MaxRetryError in args; its .reason is the NewConnectionError,
    # whose __context__ is the ConnectionRefusedError.
    assert "MaxRetryError" in names(f)
    assert "NewConnectionError" in names(f)
    assert "ECONNREFUSED" in codes(f)


def test_requests_dropped_connection(server: FakeServer) -> None:
    url = server.script("/x", Reply(drop="close"))
    f = failure_from_exception(raised(lambda: requests.get(url, timeout=5)))
    assert f.error_name == "ConnectionError"
    assert "RemoteDisconnected" in names(f)


def test_urllib_http_error_reads_status_headers_body(server: FakeServer) -> None:
    url = server.script("/x", Reply(401, headers={"WWW-Authenticate": "Bearer"}, body="no key"))
    f = failure_from_exception(raised(lambda: urllib.request.urlopen(url, timeout=5)))
    assert f.error_name == "HTTPError"
    assert (f.http_status, f.body) == (401, "no key")
    assert f.headers["www-authenticate"] == "Bearer"


def test_urllib_url_error_reason_is_a_cause() -> None:
    f = failure_from_exception(raised(lambda: urllib.request.urlopen(f"http://{closed_port_addr()}/", timeout=5)))
    assert f.error_name == "URLError"
    assert "ConnectionRefusedError" in names(f)
    assert f.error_code == "ECONNREFUSED"


def test_urllib_dropped_connection(server: FakeServer) -> None:
    url = server.script("/x", Reply(drop="close"))
    f = failure_from_exception(raised(lambda: urllib.request.urlopen(url, timeout=5)))
    assert f.error_name == "RemoteDisconnected"
    assert "Remote end closed connection" in f.message


def test_connection_error_family_errno_codes() -> None:
    assert failure_from_exception(ConnectionResetError(104, "reset")).error_code == "ECONNRESET"
    assert failure_from_exception(ConnectionRefusedError(111, "refused")).error_code == "ECONNREFUSED"
    assert failure_from_exception(BrokenPipeError(32, "pipe")).error_code == "EPIPE"


def test_asyncio_timeout() -> None:
    async def slow() -> None:
        await asyncio.wait_for(asyncio.sleep(1), 0.01)

    f = failure_from_exception(raised(lambda: asyncio.run(slow())))
    assert f.error_name == "TimeoutError"


def test_cause_and_context_chain_outermost_first() -> None:
    def explicit() -> None:
        try:
            raise ConnectionResetError(104, "reset by peer")
        except OSError as e:
            raise RuntimeError("stream broke") from e

    f = failure_from_exception(raised(explicit))
    assert f.error_name == "RuntimeError"
    assert [c.name for c in f.causes] == ["ConnectionResetError"]
    assert f.error_code == "ECONNRESET"

    def implicit() -> None:
        try:
            raise KeyError("k")
        except KeyError:
            raise ValueError("while handling")  # noqa: B904 - the test needs implicit chaining (__context__)

    assert [c.name for c in failure_from_exception(raised(implicit)).causes] == ["KeyError"]

    def suppressed() -> None:
        try:
            raise KeyError("k")
        except KeyError:
            raise ValueError("clean") from None

    assert list(failure_from_exception(raised(suppressed)).causes) == []


def test_cyclic_chain_terminates() -> None:
    a, b = ValueError("a"), ValueError("b")
    a.__cause__, b.__cause__ = b, a
    assert len(failure_from_exception(a).causes) == 1


class FakeSDKError(Exception):
    """The shape of the OpenAI/Anthropic SDK's APIStatusError without a response."""

    def __init__(self) -> None:
        super().__init__("Error code: 529 - overloaded")
        self.status_code = 529
        self.headers = {"retry-after": "3"}
        self.body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def test_sdk_shaped_error_by_attributes() -> None:
    f = failure_from_exception(FakeSDKError(), provider="anthropic")
    assert f.http_status == 529
    assert f.headers["retry-after"] == "3"
    assert json.loads(f.body)["error"]["type"] == "overloaded_error"


class TaskError(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(f"task failed: {code}")
        self.code = code


def test_string_code_attribute_is_the_error_code() -> None:
    assert failure_from_exception(TaskError("RATE_LIMIT")).error_code == "RATE_LIMIT"
    # a sentence is not a code
    assert failure_from_exception(TaskError("it went wrong")).error_code == ""


def test_grpc_error_gives_grpc_code() -> None:
    channel = grpc.insecure_channel(closed_port_addr())
    try:
        call = channel.unary_unary("/x.Y/Z", request_serializer=None, response_deserializer=None)
        exc = raised(lambda: call(b"", timeout=2))
    finally:
        channel.close()
    assert failure_from_exception(exc).grpc_code == grpc.StatusCode.UNAVAILABLE.value[0]


def test_limits_are_respected() -> None:
    big = ValueError("x" * 200_000)
    f = failure_from_exception(big)
    assert len(f.message.encode()) <= 64 << 10
    e: BaseException = ValueError("root")
    for i in range(100):
        try:
            raise ValueError(f"level {i}") from e
        except ValueError as new:
            e = new
    assert len(failure_from_exception(e).causes) == 64


def test_failure_from_response(server: FakeServer) -> None:
    url = server.script("/x", Reply(503, headers={"retry-after-ms": "150"}, body="later"))
    f = failure_from_response(httpx.get(url), provider="web")
    assert (f.http_status, f.body, f.method, f.provider) == (503, "later", "GET", "web")
    assert f.headers["retry-after-ms"] == "150"
    assert f.message.startswith("HTTP 503")
    g = failure_from_response(requests.get(url, timeout=5))
    assert (g.http_status, g.body) == (503, "later")


def test_phase_is_passed_through() -> None:
    f = failure_from_exception(ConnectionResetError(104, "x"), phase=policy_pb2.PHASE_MID_STREAM)
    assert f.phase == policy_pb2.PHASE_MID_STREAM


def test_plain_exception_has_no_http_part() -> None:
    f = failure_from_exception(ValueError("plain"))
    assert (f.http_status, f.body, len(f.headers), f.error_code) == (0, "", 0, "")
    assert (f.error_name, f.message) == ("ValueError", "plain")
