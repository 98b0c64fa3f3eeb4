"""Test harness: a real policyd process and a local HTTP server that fails on cue."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc

REPO = Path(__file__).resolve().parents[3]

# Environment the daemon must not inherit: it would change the policy or turn the journal on.
_DAEMON_ENV_DROP = (
    "DATABASE_URL",
    "POLICYD_POLICY",
    "POLICYD_LISTEN",
    "POLICYD_MAX_RETRY_ATTEMPTS",
    "POLICYD_MAX_RETRY_DELAY",
    "POLICYD_MAX_PROVIDER_RETRY_AFTER",
    "POLICYD_RETRY_IRREVERSIBLE",
    # ... or secure it: tests that want tokens or TLS pass the flags.
    "POLICYD_AUTH_TOKENS",
    "POLICYD_TLS_CERT",
    "POLICYD_TLS_KEY",
    "POLICYD_TLS_CLIENT_CA",
)


def policyd_bin() -> str:
    """Return $POLICYD_BIN, else build cmd/policyd into a temporary directory once."""
    env = os.environ.get("POLICYD_BIN")
    if env:
        if not os.access(env, os.X_OK):
            raise RuntimeError(f"POLICYD_BIN={env} is not an executable file")
        return env
    out = Path(tempfile.mkdtemp(prefix="policyd-py-bin-")) / "policyd"
    subprocess.run(["go", "build", "-o", str(out), "./cmd/policyd"], cwd=REPO, check=True)
    os.environ["POLICYD_BIN"] = str(out)  # the README subprocesses and later calls reuse it
    return str(out)


def fakeprovider_bin() -> str:
    """Return $FAKEPROVIDER_BIN, else build cmd/policyd-fakeprovider into a temporary directory once."""
    env = os.environ.get("FAKEPROVIDER_BIN")
    if env:
        if not os.access(env, os.X_OK):
            raise RuntimeError(f"FAKEPROVIDER_BIN={env} is not an executable file")
        return env
    out = Path(tempfile.mkdtemp(prefix="policyd-py-bin-")) / "policyd-fakeprovider"
    subprocess.run(["go", "build", "-o", str(out), "./cmd/policyd-fakeprovider"], cwd=REPO, check=True)
    os.environ["FAKEPROVIDER_BIN"] = str(out)
    return str(out)


class FakeProvider:
    """A `policyd-fakeprovider` process: OpenAI's and Anthropic's APIs on 127.0.0.1 with per-key
    limits (``-rpm``, ``-tpm``, ``-itpm``, ``-otpm`` in ``args``), injected failures and counts."""

    def __init__(self, binary: str, *args: str) -> None:
        self.proc = subprocess.Popen([binary, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line.startswith("listening on http://"):
            self.stop()
            raise RuntimeError(f"policyd-fakeprovider said {line!r}, not 'listening on http://...'")
        self.url = line.removeprefix("listening on ")

    def fail(self, status: int = 0, *, count: int = 1, retry_after: str = "", body: str = "",
             cut_stream: bool = False) -> None:  # fmt: skip
        """Inject a failure into the next count requests (POST /fake/fail)."""
        f: dict[str, Any] = {"status": status, "count": count, "cut_stream": cut_stream}
        if retry_after:
            f["retry_after"] = retry_after
        if body:
            f["body"] = body
        req = urllib.request.Request(self.url + "/fake/fail", data=json.dumps(f).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 204, r.status

    def stats(self) -> dict[str, int]:
        """What came (GET /fake/stats): requests, ok, rate_limited, failed, streams, input and output tokens."""
        with urllib.request.urlopen(self.url + "/fake/stats", timeout=10) as r:
            return json.loads(r.read())  # type: ignore[no-any-return]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class Daemon:
    """A `policyd serve` process on 127.0.0.1:<free port>."""

    def __init__(self, binary: str, *, database_url: str | None = None, args: tuple[str, ...] = ()) -> None:
        env = {k: v for k, v in os.environ.items() if k not in _DAEMON_ENV_DROP}
        # Fleet memory off unless a test asks for it (a later --fleet wins):
        # these tests check the client, and one test's failures must not
        # open a breaker or spend a retry budget for the next.
        cmd = [binary, "serve", "--listen", "127.0.0.1:0", "--fleet", "off", *args]
        if database_url:
            cmd += ["--database-url", database_url]
        self.log = tempfile.NamedTemporaryFile(prefix="policyd-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log, env=env)
        self.addr = self._wait_serving(timeout=30)

    def _wait_serving(self, timeout: float) -> str:
        end = time.monotonic() + timeout
        pattern = re.compile(r"msg=serving addr=(\S+)")
        while time.monotonic() < end:
            text = Path(self.log.name).read_text(errors="replace")
            m = pattern.search(text)
            if m:
                return m.group(1)
            if self.proc.poll() is not None:
                raise RuntimeError(f"policyd exited with {self.proc.returncode}:\n{text}")
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"policyd did not log 'serving' within {timeout}s:\n{Path(self.log.name).read_text()}")

    def logs(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        os.unlink(self.log.name)


@dataclass
class Reply:
    """One scripted answer: a status, headers and body, after ``delay`` seconds;
    or ``drop="close"`` (close without a response) / ``drop="reset"`` (TCP RST)."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: str = "ok"
    delay: float = 0.0
    drop: str = ""


@dataclass
class Hit:
    at: float  # time.monotonic() when the request arrived
    method: str
    path: str


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out and left: expected in these tests


class FakeServer:
    """A real HTTP server on 127.0.0.1 that answers each path from a script.

    ``script(path, Reply(503), Reply(200))`` answers the first request to path
    with 503 and every later one with the last reply.
    """

    def __init__(self) -> None:
        self._scripts: dict[str, list[Reply]] = {}
        self.hits: dict[str, list[Hit]] = defaultdict(list)
        self._lock = threading.Lock()
        self._closing = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def _serve(self) -> None:
                path = self.path.split("?", 1)[0]
                n = int(self.headers.get("content-length") or 0)
                if n:
                    self.rfile.read(n)
                with server._lock:
                    server.hits[path].append(Hit(time.monotonic(), self.command, path))
                    script = server._scripts.get(path) or [Reply(404, body="no script")]
                    reply = script.pop(0) if len(script) > 1 else script[0]
                if reply.delay:
                    server._closing.wait(reply.delay)
                if reply.drop:
                    self.close_connection = True
                    if reply.drop == "reset":
                        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.connection.close()
                    return
                data = reply.body.encode()
                self.send_response(reply.status)
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                if not any(k.lower() == "content-type" for k in reply.headers):
                    self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_HEAD = _serve

        self.httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def script(self, path: str, *replies: Reply) -> str:
        """Set path's replies and return its URL."""
        with self._lock:
            self._scripts[path] = list(replies)
            self.hits[path] = []
        return self.url(path)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def count(self, path: str) -> int:
        with self._lock:
            return len(self.hits[path])

    def first_hits(self) -> list[float]:
        """When each path was first requested (time.monotonic())."""
        with self._lock:
            return [hits[0].at for hits in self.hits.values() if hits]

    def close(self) -> None:
        self._closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()


class BlackHole:
    """A TCP listener that accepts connections and never answers: a hung daemon."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.addr = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self._conns: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                c, _ = self.sock.accept()
                self._conns.append(c)
            except OSError:
                continue

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for c in self._conns:
            c.close()
        self.sock.close()


def closed_port_addr() -> str:
    """Return 127.0.0.1:<port> where nothing listens."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"127.0.0.1:{port}"


class CountingInterceptor(grpc.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Records the method of every unary RPC made through a channel."""

    def __init__(self) -> None:
        self.methods: list[str] = []

    def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        self.methods.append(client_call_details.method.rsplit("/", 1)[-1])
        return continuation(client_call_details, request)


# ---- authentication and TLS

#: The token of tenant "acme" in tokens_file(); and one the daemon does not know.
TOKEN = "acme-python-client-token-000001"
WRONG_TOKEN = "not-a-known-token-python-000002"


def tokens_file(directory: Path) -> str:
    """Write a --auth-tokens file naming tenant acme with TOKEN; return its path."""
    path = directory / "tokens"
    path.write_text(f"acme {TOKEN}\n")
    path.chmod(0o600)
    return str(path)


@dataclass
class Certs:
    """PEM files of a throwaway CA, a server certificate for 127.0.0.1 and localhost, and a client one."""

    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str


def make_certs(directory: Path) -> Certs:
    """Generate Certs in directory with the openssl command-line tool (P-256 keys, valid one day)."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
    openssl("req", "-x509", *ec, "-keyout", "ca-key.pem", "-out", "ca.pem", "-days", "1",
            "-subj", "/CN=policyd python test CA",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,digitalSignature")  # fmt: skip
    for name, ext in (
        ("server", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"),
        ("client", "extendedKeyUsage=clientAuth\n"),
    ):
        (directory / f"{name}.ext").write_text("keyUsage=critical,digitalSignature\n" + ext)
        cn = "localhost" if name == "server" else "agent"
        openssl("req", *ec, "-keyout", f"{name}-key.pem", "-out", f"{name}.csr", "-subj", f"/CN={cn}")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
                "-days", "1", "-out", f"{name}.pem", "-extfile", f"{name}.ext")  # fmt: skip
    d = str(directory)
    return Certs(f"{d}/ca.pem", f"{d}/server.pem", f"{d}/server-key.pem", f"{d}/client.pem", f"{d}/client-key.pem")
