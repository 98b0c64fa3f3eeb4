package fleet

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestSplitByClass(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                 string
		f                    float64
		first, batch         int // first attempts a second over the window, and the batch ones among them
		ok                   bool
		interactive, batchFr float64
	}{
		{"interactive all in, batch the rest", 0.6, 20, 10, true, 1, 0.2},
		{"interactive short: batch at its floor", 0.3, 20, 10, true, (6 - 0.03*10) / 10, 0.03},
		{"no batch", 0.5, 20, 0, false, 0.5, 0.5},
		{"nothing but batch", 0.5, 20, 20, false, 0.5, 0.5},
		{"not paced", 1, 20, 10, false, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := Defaults()
			now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
			b := &Bucket{}
			b.ensureRings(&c.Breaker)
			secs := int(c.Breaker.Window.Seconds())
			b.firstAttempts.add(now, tt.first*secs)
			b.addBatch(now, &c.Breaker, int64(tt.batch*secs))
			fi, fb, ok := b.splitByClass(now, &c, tt.f)
			if ok != tt.ok || math.Abs(fi-tt.interactive) > 1e-9 || math.Abs(fb-tt.batchFr) > 1e-9 {
				t.Fatalf("split %v: %v, %v, %v; want %v, %v, %v", tt.f, fi, fb, ok, tt.interactive, tt.batchFr, tt.ok)
			}
		})
	}
}

// A paced bucket's assignment gives interactive calls the room first, and
// says so.
func TestPacedAssignmentSplitsClasses(t *testing.T) {
	t.Parallel()
	f, _, _ := newTestFleet(t, nil)
	for _, client := range []string{"a", "b"} {
		// 10 first attempts a second each, half of them batch.
		f.Report(Usage{Target: streamTarget, ClientID: client, Admitted: 100, BatchFirst: 50, RequestsPerMinute: 600})
	}
	a := f.Assign(streamTarget, "a")
	// The pace admits 0.93 × 10 of 20 a second: 9.3 of room, 10 interactive.
	wantBatch := BatchFloor * 0.93 * 10 / 20
	wantInteractive := (9.3 - wantBatch*10) / 10
	if !a.Classes || math.Abs(a.AdmitFraction-wantInteractive) > 0.01 || math.Abs(a.BatchAdmitFraction-wantBatch) > 0.01 ||
		!strings.Contains(a.Reason, "batch yields first") {
		t.Fatalf("assignment %+v, want interactive %.3f and batch %.3f", a, wantInteractive, wantBatch)
	}
	if b := f.Assign(Target{Tenant: "team", Provider: "openai", Model: "gpt-4o-mini", KeyID: "prod"}, "a"); b.Classes {
		t.Fatalf("an unpaced bucket's assignment splits classes: %+v", b)
	}
}
