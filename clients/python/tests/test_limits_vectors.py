"""clients/testdata/limits.json: the fleet protocol's limits, which the daemon's validation and
the Go and TypeScript clients check too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from policyd_client import _fleet, _gate, failure

LIMITS: dict[str, Any] = json.loads((Path(__file__).resolve().parents[2] / "testdata" / "limits.json").read_text())

MS = 1000


@pytest.mark.parametrize(
    ("section", "name", "ours"),
    [
        ("protocol", "usages_per_message", _fleet.MAX_USAGES),
        ("protocol", "count_max", _fleet.MAX_COUNT),
        ("protocol", "elapsed_max_ms", _fleet.MAX_ELAPSED * MS),
        ("protocol", "rate_limit_headers_max", _fleet.MAX_RATE_LIMIT_HEADERS),
        ("protocol", "rate_limit_value_bytes_max", _fleet.MAX_RATE_LIMIT_VALUE_BYTES),
        ("protocol", "rate_limit_header_prefixes", list(_fleet.RATE_LIMIT_PREFIXES)),
        ("protocol", "targets_per_stream", _fleet.MAX_TARGETS),
        ("protocol", "target_field_bytes_max", failure._FIELD_BYTES),
        ("protocol", "key_id_bytes_max", failure._LABEL_BYTES),
        ("protocol", "input_tokens_per_call_max", _fleet.MAX_CALL_INPUT_TOKENS),
        ("client", "elapsed_min_ms", _fleet.MIN_ELAPSED * MS),
        ("client", "report_interval_ms", _fleet.REPORT_INTERVAL * MS),
        ("client", "report_jitter", _fleet.REPORT_JITTER),
        ("client", "first_assignment_wait_ms", _fleet.FIRST_ASSIGNMENT_WAIT * MS),
        ("client", "gate_grace_ms", _gate.GRACE * MS),
        ("client", "reconnect_initial_ms", _fleet.BACKOFF_INITIAL * MS),
        ("client", "reconnect_max_ms", _fleet.BACKOFF_MAX * MS),
    ],
)
def test_limit(section: str, name: str, ours: object) -> None:
    assert ours == LIMITS[section][name]
