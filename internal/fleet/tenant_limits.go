package fleet

import (
	"fmt"
	"time"

	"golang.org/x/time/rate"
)

// LimitError is a tenant over one of its limits: the call is refused, the
// other tenants never notice.
type LimitError struct {
	// Limit names it, as the policy file does (e.g. "reports_per_second").
	Limit string
	// RetryIn is when the tenant is under it again.
	RetryIn time.Duration
	Reason  string
}

func (e *LimitError) Error() string { return e.Reason }

// AdmitReports takes n usages from the tenant's report rate
// (Config.ReportsPerSecond), or returns a *LimitError. The first refusal,
// and then one a minute, is a tenant_limit event (logged, counted and
// journaled by the sink) naming the bucket of target.
func (f *Fleet) AdmitReports(target Target, n int) error {
	c := f.cfg.Load()
	if c.ReportsPerSecond <= 0 || n <= 0 {
		return nil
	}
	now := f.clock()
	burst := max(int(c.ReportsPerSecond), 1)
	f.store.lock()
	tb := f.store.tenant(target.Tenant, true)
	if tb.reports == nil || tb.reports.Limit() != rate.Limit(c.ReportsPerSecond) || tb.reports.Burst() != burst {
		tb.reports = rate.NewLimiter(rate.Limit(c.ReportsPerSecond), burst)
	}
	if tb.reports.AllowN(now, n) {
		f.store.unlock()
		return nil
	}
	wait := time.Duration(float64(n) / c.ReportsPerSecond * float64(time.Second))
	err := &LimitError{Limit: "reports_per_second", RetryIn: wait,
		Reason: fmt.Sprintf("the tenant's Coordinate streams report more than %g targets a second (fleet.reports_per_second); retry in %v",
			c.ReportsPerSecond, wait.Round(time.Millisecond))}
	tb.reportsRefused++
	var events []Event
	if tb.reportsLimitAt.IsZero() || now.Sub(tb.reportsLimitAt) >= limitEvery {
		events = append(events, Event{At: now, Key: c.Scopes.key(ScopeAvailability, target), Kind: EventTenantLimit,
			Reason: err.Reason, Counts: map[string]int64{"reports_per_second": int64(c.ReportsPerSecond), "refused": tb.reportsRefused}})
		tb.reportsRefused, tb.reportsLimitAt = 0, now
	}
	f.store.unlock()
	f.publish(events, target.Tenant)
	return err
}
