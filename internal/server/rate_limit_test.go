package server

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestTenantLimiter(t *testing.T) {
	t.Parallel()
	now := testNow
	l := newTenantLimiter(2, 1) // a token every 500ms, one at a time
	l.now = func() time.Time { return now }
	steps := []struct {
		name        string
		advance     time.Duration
		tenant      string
		wantRetryIn time.Duration // 0: admitted
	}{
		{name: "first call", tenant: "acme"},
		{name: "second at once", tenant: "acme", wantRetryIn: 500 * time.Millisecond},
		{name: "other tenant has its own bucket", tenant: "beta"},
		{name: "a quarter later", advance: 250 * time.Millisecond, tenant: "acme", wantRetryIn: 250 * time.Millisecond},
		{name: "refilled", advance: 250 * time.Millisecond, tenant: "acme"},
		{name: "a sub-millisecond wait rounds up to 1ms", advance: 499*time.Millisecond + 900*time.Microsecond, tenant: "acme", wantRetryIn: time.Millisecond},
	}
	for _, s := range steps { // in order: each step depends on the ones before
		now = now.Add(s.advance)
		err := l.admit(s.tenant)
		if s.wantRetryIn == 0 {
			if err != nil {
				t.Fatalf("%s: %v, want admitted", s.name, err)
			}
			continue
		}
		rl, ok := errors.AsType[*RateLimitedError](err)
		if !ok || rl.RetryIn != s.wantRetryIn {
			t.Fatalf("%s: %v, want a RateLimitedError retrying in %v", s.name, err, s.wantRetryIn)
		}
	}
}

func TestTenantLimiterLogsOnceAMinute(t *testing.T) {
	t.Parallel()
	now := testNow
	var buf bytes.Buffer
	l := newTenantLimiter(1, 1)
	l.now = func() time.Time { return now }
	l.logger = slog.New(slog.NewTextHandler(&buf, nil))
	for range 5 {
		_ = l.admit("acme")
	}
	now = now.Add(time.Minute)
	for range 3 {
		_ = l.admit("acme")
		_ = l.admit("acme")
	}
	if n := strings.Count(buf.String(), "tenant over --rate-limit"); n != 2 {
		t.Fatalf("%d log lines, want one for the first refusal and one a minute later:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), "refused=4") { // 3 after the first line, and this one
		t.Errorf("the second line does not count the refusals since the first:\n%s", buf.String())
	}
}
