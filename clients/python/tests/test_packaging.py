"""The package builds as a typed distribution that carries its generated stubs."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_carries_py_typed_and_the_generated_stubs(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
    )
    (wheel,) = tmp_path.glob("policyd_client-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for want in (
        "policyd_client/py.typed",
        "policyd_client/client.py",
        "policyd_client/aio.py",
        "policyd_client/_gen/policyd/v1/policy_pb2.py",
        "policyd_client/_gen/policyd/v1/policy_pb2.pyi",
        "policyd_client/_gen/policyd/v1/journal_pb2_grpc.py",
    ):
        assert want in names, want
    meta = next(n for n in names if n.endswith("METADATA"))
    text = zipfile.ZipFile(wheel).read(meta).decode()
    assert "Requires-Dist: grpcio<2,>=1.85.1" in text
    assert "Requires-Dist: protobuf<8,>=7.35.1" in text
    assert 'Requires-Dist: uuid6>=2025.0.1; python_version < "3.14"' in text
    header = text.split("\n\n", 1)[0]
    httpx = [line for line in header.splitlines() if line.startswith("Requires-Dist: httpx")]
    # Not a runtime dependency: the transport's extras, policyd-client[httpx] and [httpx2].
    assert httpx == ["Requires-Dist: httpx<1,>=0.28; extra == \"httpx\"",
                     "Requires-Dist: httpx2<3,>=2.16; python_version >= \"3.11\" and extra == \"httpx2\""]  # fmt: skip
    # Nor is OpenTelemetry: its API is the otel extra (policyd-client[otel]).
    otel = [line for line in header.splitlines() if line.startswith("Requires-Dist: opentelemetry")]
    assert otel == ['Requires-Dist: opentelemetry-api<2,>=1.30; extra == "otel"']
