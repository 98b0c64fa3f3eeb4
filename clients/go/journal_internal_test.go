package policyd

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/google/uuid"
)

// The context ids the client makes are UUIDv7 (RFC 9562): time-ordered, so
// that the journal's B-tree primary keys grow at their right edge.
func TestNewContextIDIsV7(t *testing.T) {
	t.Parallel()
	before := time.Now().UnixMilli()
	seen := map[string]bool{}
	for range 100 {
		id := newContextID()
		u, err := uuid.Parse(id)
		if err != nil {
			t.Fatalf("newContextID() = %q: not a UUID: %v", id, err)
		}
		if u.Version() != 7 || u.Variant() != uuid.RFC4122 {
			t.Fatalf("newContextID() = %q: version %d, variant %v; want version 7, RFC 9562 variant",
				id, u.Version(), u.Variant())
		}
		if id != u.String() {
			t.Fatalf("newContextID() = %q: not in canonical (lowercase, hyphenated) form", id)
		}
		if seen[id] {
			t.Fatalf("newContextID() = %q twice", id)
		}
		seen[id] = true
		// unix_ts_ms: the first 48 bits.
		ms := int64(binary.BigEndian.Uint64(append([]byte{0, 0}, u[:6]...)))
		if after := time.Now().UnixMilli(); ms < before || ms > after {
			t.Fatalf("newContextID() = %q: timestamp %d ms, want within [%d, %d]", id, ms, before, after)
		}
	}
}

// Ids made in different milliseconds sort (as strings, as the journal's
// uuid keys do) in the order they were made.
func TestNewContextIDTimeOrdered(t *testing.T) {
	t.Parallel()
	ids := make([]string, 5)
	for i := range ids {
		if i > 0 {
			time.Sleep(2 * time.Millisecond)
		}
		ids[i] = newContextID()
	}
	for i := 1; i < len(ids); i++ {
		if ids[i-1] >= ids[i] {
			t.Fatalf("id %d (%q) does not sort before id %d (%q), made 2 ms later", i-1, ids[i-1], i, ids[i])
		}
	}
}
