package journal

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the error report of a failed context, in the spirit of seed
// 004's ErrorReport: the root cause (the classification of the attempt that
// ended the context), what to do about it, whether a retry can ever help
// and, when not, the manual action the user must take, and the full attempt
// history. FinishContext writes it once; later attempts do not change it.
type Report struct {
	ContextID string
	// RootCauseType, RootCauseRule and RootCauseMessage are the last
	// attempt's failure type, rule and message (empty without attempts).
	RootCauseType, RootCauseRule, RootCauseMessage string
	// RecoveryAction is the last attempt's recovery action, or the failure
	// type's default when the attempt carried none.
	RecoveryAction string
	// Unrecoverable says no retry can succeed until someone acts;
	// ManualAction says what they must do.
	Unrecoverable bool
	ManualAction  string
	// Attempts is the history the report covers, in order.
	Attempts []Attempt
	// Text is the report rendered for humans: deterministic for the same
	// context and attempts, at most 64 KiB.
	Text      string
	CreatedAt time.Time
}

// TypeText is a failure type's own text, as the classification rules data
// gives it (internal/classifier, the rules' types section): the recovery
// action of an attempt recorded without one and, for the types no retry or
// fallback fixes (seed 004's DetectUnrecoverableCondition), the manual
// action a report names. The journal keeps no copy: the server installs
// the function (Store.SetTypeText).
type TypeText struct{ Recovery, ManualAction string }

// buildReport makes the report of failed context c from its attempts (in
// order), created at now, with each failure type's text from text (nil:
// none).
func buildReport(c Context, attempts []Attempt, now time.Time, text func(failureType string) TypeText) Report {
	r := Report{ContextID: c.ID, Attempts: attempts, CreatedAt: now}
	if len(attempts) > 0 {
		last := attempts[len(attempts)-1]
		r.RootCauseType, r.RootCauseRule, r.RootCauseMessage = last.FailureType, last.Rule, clip(last.Message, maxTextLen)
		var tt TypeText
		if text != nil {
			tt = text(last.FailureType)
		}
		r.RecoveryAction = last.RecoveryAction
		if r.RecoveryAction == "" {
			r.RecoveryAction = tt.Recovery
		}
		// A failure that fell back was routed around (a context too long
		// went to a larger model): nobody needs to act on it.
		if tt.ManualAction != "" && last.Decision != DecisionFallBack {
			r.Unrecoverable, r.ManualAction = true, tt.ManualAction
		}
	}
	r.Text = renderReport(c, r)
	return r
}

// Rendering limits: a report shows at most reportHead + reportTail attempts
// and is at most maxReportLen characters.
const (
	reportHead   = 100
	reportTail   = 100
	maxReportLen = 64 * 1024
)

const reportTime = "2006-01-02T15:04:05.000Z07:00"

// renderReport is Report.Text: a header naming the context, the root cause,
// the recovery, whether it is unrecoverable, then one line per attempt and
// the total wait. Only c's fields and r's are used, so the text is the same
// whenever it is rendered from the same data.
func renderReport(c Context, r Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Error report for retry context %s\n", c.ID)
	writeFacts(&b, [][2]string{{"Tenant", c.Tenant}, {"Agent", c.Agent}, {"Operation", c.Operation}, {"Profile", c.Profile}})
	writeFacts(&b, [][2]string{{"Provider", c.Provider}, {"Model", c.Model}})
	fmt.Fprintf(&b, "Started %s", c.StartedAt.UTC().Format(reportTime))
	if !c.FinishedAt.IsZero() {
		fmt.Fprintf(&b, ", finished %s (after %s)", c.FinishedAt.UTC().Format(reportTime), c.FinishedAt.Sub(c.StartedAt))
	}
	fmt.Fprintf(&b, "; %s after %s\n\n", c.Outcome, plural(len(r.Attempts), "attempt"))

	if r.RootCauseType == "" && r.RootCauseRule == "" && r.RootCauseMessage == "" {
		b.WriteString("Root cause: unknown (no attempts were recorded)\n")
	} else {
		fmt.Fprintf(&b, "Root cause: %s", orDash(r.RootCauseType))
		if r.RootCauseRule != "" {
			fmt.Fprintf(&b, " (rule %s)", r.RootCauseRule)
		}
		b.WriteString("\n")
		if r.RootCauseMessage != "" {
			fmt.Fprintf(&b, "  %s\n", oneLine(r.RootCauseMessage))
		}
	}
	if r.RecoveryAction != "" {
		fmt.Fprintf(&b, "Recovery: %s\n", oneLine(r.RecoveryAction))
	}
	if r.Unrecoverable {
		fmt.Fprintf(&b, "Unrecoverable: yes. Manual action required: %s.\n", r.ManualAction)
	} else {
		b.WriteString("Unrecoverable: no\n")
	}

	b.WriteString("\nAttempts:\n")
	if len(r.Attempts) == 0 {
		b.WriteString("  (none recorded)\n")
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	var wait time.Duration
	for i, a := range r.Attempts {
		wait += a.Delay
		if n := len(r.Attempts); n > reportHead+reportTail && i >= reportHead && i < n-reportTail {
			if i == reportHead {
				fmt.Fprintf(tw, "  … %s omitted …\n", plural(n-reportHead-reportTail, "attempt"))
			}
			continue
		}
		// Columns are cut so that even MaxAttempt attempts of the longest
		// texts fit in maxReportLen with the total at the end.
		fmt.Fprintf(tw, "  #%d\t%s\t%s\t%s\t%s%s\n", a.Attempt, a.At.UTC().Format(reportTime),
			clip(orDash(a.FailureType), 40), clip(statusCode(a), 48), clip(decision(a), 80), clip(via(c, a), 64))
	}
	tw.Flush()
	fmt.Fprintf(&b, "Total wait: %s\n", wait)
	return clip(b.String(), maxReportLen)
}

func writeFacts(b *strings.Builder, facts [][2]string) {
	var parts []string
	for _, f := range facts {
		if f[1] != "" {
			parts = append(parts, f[0]+": "+oneLine(f[1]))
		}
	}
	if len(parts) > 0 {
		b.WriteString(strings.Join(parts, " · ") + "\n")
	}
}

func statusCode(a Attempt) string {
	switch {
	case a.HTTPStatus != 0 && a.ErrorCode != "":
		return fmt.Sprintf("%d %s", a.HTTPStatus, a.ErrorCode)
	case a.HTTPStatus != 0:
		return fmt.Sprint(a.HTTPStatus)
	case a.ErrorCode != "":
		return a.ErrorCode
	}
	return "-"
}

func decision(a Attempt) string {
	switch a.Decision {
	case DecisionRetry:
		return "retry in " + a.Delay.String()
	case DecisionStop:
		if a.StopReason != "" {
			return "stop (" + oneLine(a.StopReason) + ")"
		}
		return "stop"
	case DecisionFallBack:
		s := "fall back"
		if a.Fallback != "" {
			s += " to " + a.Fallback
		}
		if a.Delay > 0 {
			s += " in " + a.Delay.String()
		}
		return s
	}
	return "no decision"
}

// via names the provider and model of an attempt that used other ones than
// its context (after a fallback).
func via(c Context, a Attempt) string {
	p, m := a.Provider, a.Model
	if (p == "" || p == c.Provider) && (m == "" || m == c.Model) {
		return ""
	}
	if p == "" {
		p = c.Provider
	}
	if m == "" {
		m = c.Model
	}
	return "  [" + strings.Trim(p+"/"+m, "/") + "]"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// errorReport reads the tenant's report of context id, with the attempts it
// covers.
func (s *Store) errorReport(ctx context.Context, q querier, tenant, id string) (Report, error) {
	var (
		r    Report
		last int
	)
	err := q.QueryRow(ctx, `
		SELECT r.context_id::text, r.created_at, r.root_cause_type, r.root_cause_rule, r.root_cause_message,
		       r.recovery_action, r.unrecoverable, r.manual_action, r.last_attempt, r.text
		FROM error_reports r JOIN retry_contexts c ON c.id = r.context_id
		WHERE r.context_id = $1 AND c.tenant = $2`, id, tenant).
		Scan(&r.ContextID, &r.CreatedAt, &r.RootCauseType, &r.RootCauseRule, &r.RootCauseMessage,
			&r.RecoveryAction, &r.Unrecoverable, &r.ManualAction, &last, &r.Text)
	if err != nil {
		return Report{}, err
	}
	r.CreatedAt = r.CreatedAt.UTC()
	r.Attempts, err = s.attempts(ctx, q, id, last)
	return r, err
}

// GetErrorReport returns the error report of the tenant's context id.
// ErrNotFound when the tenant has no such context or it has no report (it
// is not finished, or did not fail).
func (s *Store) GetErrorReport(ctx context.Context, tenant, id string) (Report, error) {
	id, err := normalizeID("context_id", id)
	if err != nil {
		return Report{}, fmt.Errorf("get error report: %w", err)
	}
	var r Report
	err = s.run(ctx, "get error report of "+id, func(ctx context.Context) error {
		var err error
		r, err = s.errorReport(ctx, s.pool, tenant, id)
		return err
	})
	return r, err
}
