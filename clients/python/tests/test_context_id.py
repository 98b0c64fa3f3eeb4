"""The context ids the client makes: time-ordered UUIDv7 (RFC 9562), not random v4.

A unit test: no daemon. v7 ids keep the journal's B-tree primary keys growing
at their right edge (see _core.new_context_id).
"""

from __future__ import annotations

import time
import uuid

from policyd_client import _core


def assert_v7(cid: str) -> uuid.UUID:
    u = uuid.UUID(cid)
    assert str(u) == cid, "not in canonical (lowercase, hyphenated) form"
    assert u.version == 7, f"{cid}: version {u.version}, want 7"
    assert u.variant == uuid.RFC_4122, f"{cid}: variant {u.variant}, want the RFC 9562 one"
    return u


def test_new_context_id_is_a_uuid7() -> None:
    before = time.time_ns() // 1_000_000
    cid = _core.new_context_id()
    after = time.time_ns() // 1_000_000
    u = assert_v7(cid)
    # unix_ts_ms, the first 48 bits. The uuid6 package keeps its ids monotonic by
    # moving the timestamp past the last one's, which may run ahead of the clock
    # after a burst of ids: allow for that.
    ms = u.int >> 80
    assert before <= ms <= after + 1000, f"{cid}: timestamp {ms} ms, want within [{before}, {after + 1000}]"
    ids = {_core.new_context_id() for _ in range(100)}
    assert len(ids) == 100
    for i in ids:
        assert_v7(i)


def test_context_ids_made_across_milliseconds_sort_in_creation_order() -> None:
    ids = []
    for _ in range(5):
        ids.append(_core.new_context_id())
        time.sleep(0.002)
    assert ids == sorted(ids), "ids made 2 ms apart do not sort (as strings) in creation order"
    assert [uuid.UUID(i).bytes for i in ids] == sorted(uuid.UUID(i).bytes for i in ids)


def test_a_journaled_call_without_a_context_id_gets_a_uuid7() -> None:
    st = _core.new_state(None, True, None, 0.0, time.time())
    assert st.context_id is not None
    assert_v7(st.context_id)
    # A caller's own id is kept as it is (any UUID).
    own = str(uuid.uuid4())
    assert _core.new_state(None, True, own, 0.0, time.time()).context_id == own
    assert _core.new_state(None, False, None, 0.0, time.time()).context_id is None
