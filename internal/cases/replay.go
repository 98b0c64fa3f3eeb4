package cases

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/enums"
	"github.com/policyd/policyd/internal/policy"
)

// fixedRand is a random source that always draws the same number.
type fixedRand float64

func (r fixedRand) Float64() float64 { return float64(r) }

// The two ends of the random source a case is decided at: a jittered delay
// must satisfy the case at both.
var randEnds = [2]fixedRand{0, 0.999999}

// Outcome is a case replayed.
type Outcome struct {
	Case *Case
	// Decisions at both ends of the random source; their classification is
	// the case's.
	Decisions [2]*policydv1.Decision
	// Mismatches against what policyd is expected to answer (the source's
	// verdict, or the documented disagreement over it).
	Mismatches []string
	// SourceMismatches against the source's own verdict.
	SourceMismatches []string
	// Err is a case that could not be replayed (an unknown profile).
	Err error
}

// Pass reports whether policyd answered as the case says: as the source
// does, or, for a documented disagreement, as the disagreement says and
// not as the source does (a stale disagreement fails, so it gets removed).
func (o *Outcome) Pass() bool {
	if o.Err != nil || len(o.Mismatches) > 0 {
		return false
	}
	return o.Case.Policyd == nil || len(o.SourceMismatches) > 0
}

// AgreesWithSource reports whether policyd gave the source's verdict.
func (o *Outcome) AgreesWithSource() bool { return o.Err == nil && len(o.SourceMismatches) == 0 }

// Classification is the case's classification.
func (o *Outcome) Classification() *policydv1.Classification {
	if o.Decisions[0] == nil {
		return nil
	}
	return o.Decisions[0].GetClassification()
}

// Replay decides c with the policy p.
func Replay(p *policy.Policy, c *Case) *Outcome {
	o := &Outcome{Case: c}
	profile := policy.ProfileName(c.Profile)
	if _, ok := p.Profiles[profile]; !ok {
		o.Err = fmt.Errorf("profile %q is not in the policy (have %s)", profile, strings.Join(p.ProfileNames(), ", "))
		return o
	}
	req := &policydv1.NextDelayRequest{
		Failure: c.Failure, FailureType: c.FailureType, Attempt: int32(c.Attempt), Profile: profile,
		Safety: c.Safety, Options: c.Options,
	}
	if c.Elapsed > 0 {
		req.Elapsed = durationpb.New(c.Elapsed)
	}
	if c.Deadline > 0 {
		req.Deadline = timestamppb.New(c.Now.Add(c.Deadline))
	}
	for i, r := range randEnds {
		o.Decisions[i] = p.NextDelay(req, c.Now, r)
	}
	o.Mismatches = o.compare(c.Effective())
	o.SourceMismatches = o.compare(c.Expect)
	return o
}

// compare lists how the decisions differ from e.
func (o *Outcome) compare(e Expect) []string {
	var out []string
	add := func(key string, want, got any) {
		out = append(out, fmt.Sprintf("%s: want %v, got %v", key, want, got))
	}
	d := o.Decisions[0]
	cls := d.GetClassification()
	if e.Retryable != nil && *e.Retryable != cls.GetRetryable() {
		add("retryable", *e.Retryable, cls.GetRetryable())
	}
	if e.Type != "" {
		want, _ := FailureType(e.Type)
		if want != cls.GetFailureType() {
			add("type", enums.Short(want), enums.Short(cls.GetFailureType()))
		}
	}
	if e.Rule != "" && e.Rule != cls.GetRule() {
		add("rule", e.Rule, cls.GetRule())
	}
	if e.RetryAfter != "" {
		got := "none"
		if cls.GetRetryAfter() != nil {
			got = cls.GetRetryAfter().AsDuration().String()
		}
		want := e.RetryAfter
		if want != "none" {
			w, _ := time.ParseDuration(want)
			want = w.String()
		}
		if want != got {
			add("retry_after", want, got)
		}
	}
	wantAction := e.Action
	if wantAction == "" && (e.Delay != nil || e.DelayMin != nil || e.DelayMax != nil) {
		wantAction = "retry"
	}
	for i, d := range o.Decisions {
		at := ""
		if i == 1 {
			at = " (random source at its top)"
		}
		gotAction := enums.Lower(d.GetAction())
		if wantAction != "" {
			want, _ := Action(wantAction)
			if want != d.GetAction() {
				add("action"+at, enums.Lower(want), gotAction+describe(d))
				continue
			}
		}
		if e.StopReason != "" {
			want, _ := StopReason(e.StopReason)
			if want != d.GetStopReason() {
				add("stop_reason"+at, enums.Lower(want), enums.Lower(d.GetStopReason()))
			}
		}
		if d.GetAction() != policydv1.Action_ACTION_RETRY {
			continue
		}
		delay := d.GetDelay().AsDuration()
		switch {
		case e.Delay != nil && delay != *e.Delay:
			add("delay"+at, *e.Delay, delay)
		case e.DelayMin != nil && delay < *e.DelayMin:
			add("delay"+at, "≥ "+e.DelayMin.String(), delay)
		case e.DelayMax != nil && delay > *e.DelayMax:
			add("delay"+at, "≤ "+e.DelayMax.String(), delay)
		}
	}
	return dedupe(out)
}

// describe adds a stop's reason or a retry's delay to an action's name.
func describe(d *policydv1.Decision) string {
	switch d.GetAction() {
	case policydv1.Action_ACTION_RETRY:
		return " after " + d.GetDelay().AsDuration().String()
	default:
		if r := d.GetStopReason(); r != policydv1.StopReason_STOP_REASON_UNSPECIFIED {
			return " (" + enums.Lower(r) + ")"
		}
	}
	return ""
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		key := strings.TrimSuffix(s, " (random source at its top)")
		if !seen[key] {
			seen[key] = true
			out = append(out, s)
		}
	}
	return out
}

// Explain renders what policyd answered, for a disagreement's report line.
func (o *Outcome) Explain() string {
	if o.Err != nil {
		return o.Err.Error()
	}
	cls := o.Classification()
	d := o.Decisions[0]
	s := fmt.Sprintf("%s retryable=%v rule=%s → %s%s", enums.Short(cls.GetFailureType()),
		cls.GetRetryable(), cls.GetRule(), enums.Lower(d.GetAction()), describe(d))
	return s
}

// Stats is agreement within one group of cases.
type Stats struct {
	Suite, Group string
	Cases        int
	// Agree: policyd gave the source's verdict on every key.
	Agree int
	// Documented: policyd differs on purpose, with the reason in the case.
	Documented int
	// Failing: neither (a regression or a stale disagreement).
	Failing int
	// RetryableCases and RetryableAgree count the cases labelled retryable
	// or not, and those where policyd's retryable matches the source.
	RetryableCases, RetryableAgree int
}

// Summarize counts agreement per suite and group, sorted.
func Summarize(outcomes []*Outcome) []Stats {
	byKey := map[string]*Stats{}
	for _, o := range outcomes {
		key := o.Case.Suite + "\x00" + o.Case.Group
		st := byKey[key]
		if st == nil {
			st = &Stats{Suite: o.Case.Suite, Group: o.Case.Group}
			byKey[key] = st
		}
		st.Cases++
		switch {
		case !o.Pass():
			st.Failing++
		case o.AgreesWithSource():
			st.Agree++
		default:
			st.Documented++
		}
		if r := o.Case.Expect.Retryable; r != nil && o.Err == nil {
			st.RetryableCases++
			if *r == o.Classification().GetRetryable() {
				st.RetryableAgree++
			}
		}
	}
	out := make([]Stats, 0, len(byKey))
	for _, st := range byKey {
		out = append(out, *st)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Suite != out[j].Suite {
			return out[i].Suite > out[j].Suite // peers before corpus
		}
		return strings.ToLower(out[i].Group) < strings.ToLower(out[j].Group)
	})
	return out
}

// Total adds up stats.
func Total(stats []Stats, suite string) Stats {
	t := Stats{Suite: suite, Group: "all"}
	if suite == "" {
		t.Suite = "all suites"
	}
	for _, s := range stats {
		if suite != "" && s.Suite != suite {
			continue
		}
		t.Cases += s.Cases
		t.Agree += s.Agree
		t.Documented += s.Documented
		t.Failing += s.Failing
		t.RetryableCases += s.RetryableCases
		t.RetryableAgree += s.RetryableAgree
	}
	return t
}

// Percent renders n of total as a percentage.
func Percent(n, total int) string {
	if total == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f %%", 100*float64(n)/float64(total))
}
