package classifier

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// RuleUnknown is the rule id of the answer given when no rule matched.
const RuleUnknown = "unknown"

// DefaultProfile is the profile of a request that names none (policy's
// DefaultProfile is this one): profile-scoped rules match it.
const DefaultProfile = "default"

// RuleShouldRetryHeader is the rule id of an answer that the server's
// x-should-retry header decided.
const RuleShouldRetryHeader = "header.x-should-retry"

// RuleServerRetryableFlag is the rule id of an answer that the response's
// own "retriable: true|false" decided (with no x-should-retry header).
const RuleServerRetryableFlag = "server.retryable-flag"

// RulePushbackStop is the rule id of an answer that a negative or
// unparsable grpc-retry-pushback-ms decided: gRFC A6 reads it as the server
// asking the client not to retry.
const RulePushbackStop = "header.grpc-retry-pushback-ms"

// Classifier classifies failures by an ordered rules table. It is safe for
// concurrent use; build a new one to change the rules.
type Classifier struct {
	rules []compiledRule
	types map[policydv1.FailureType]TypeText
	indexes
	nblocks int
	now     func() time.Time
	pool    sync.Pool
	// learned answers, in the profiles of learnedIn, the failures no rule
	// recognises (learned.go).
	learned   *Model
	learnedIn map[string]bool
}

// Option configures a Classifier.
type Option func(*Classifier)

// WithClock sets the clock used to read HTTP-date and epoch delay hints.
// The default is time.Now.
func WithClock(now func() time.Time) Option {
	return func(c *Classifier) { c.now = now }
}

// WithLearnedFallback turns the learned fallback on in the named profiles:
// a failure no rule recognises is answered from the labelled failures it
// most resembles (learned.go) instead of UNKNOWN. model nil is the built-in
// one, counted from the conformance corpus.
func WithLearnedFallback(model *Model, profiles ...string) Option {
	return func(c *Classifier) {
		if model == nil {
			model = BuiltinModel()
		}
		c.learned = model
		c.learnedIn = make(map[string]bool, len(profiles))
		for _, p := range profiles {
			c.learnedIn[p] = true
		}
	}
}

// New compiles a rule set. Errors name the rule's file and line and the field.
func New(rs RuleSet, opts ...Option) (*Classifier, error) {
	rules, idx, nblocks, err := compile(rs)
	if err != nil {
		return nil, err
	}
	types, err := compileTypes(rs.Types)
	if err != nil {
		return nil, err
	}
	c := &Classifier{rules: rules, types: types, indexes: idx, nblocks: nblocks, now: time.Now}
	for _, o := range opts {
		o(c)
	}
	c.pool.New = func() any { return &facts{} }
	return c, nil
}

// Default returns a classifier with the built-in rules.
func Default(opts ...Option) *Classifier {
	c, err := New(DefaultRuleSet(), opts...)
	if err != nil {
		panic("classifier: built-in rules: " + err.Error())
	}
	return c
}

// TypeText is failure type t's own text (the rules data's types section);
// empty fields when it gives none.
func (c *Classifier) TypeText(t policydv1.FailureType) TypeText { return c.types[t] }

// RuleIDs returns the ids of the rules in precedence order.
func (c *Classifier) RuleIDs() []string {
	ids := make([]string, len(c.rules))
	for i, r := range c.rules {
		ids[i] = r.id
	}
	return ids
}

// Classify classifies f. opts may be nil; an empty profile means
// DefaultProfile.
// It never fails: a failure no rule recognises is FAILURE_TYPE_UNKNOWN,
// not retryable, under rule "unknown".
func (c *Classifier) Classify(f *policydv1.Failure, opts *policydv1.ClassifyOptions, profile string) *policydv1.Classification {
	return c.ClassifyAt(f, opts, profile, c.now())
}

// ClassifyAt is Classify at the time now, which dated delay hints (an
// HTTP-date Retry-After, an epoch reset) are read against when the response
// carries no Date header. NextDelay passes its own clock, so one decision
// reads one time.
func (c *Classifier) ClassifyAt(f *policydv1.Failure, opts *policydv1.ClassifyOptions, profile string, now time.Time) *policydv1.Classification {
	if f == nil {
		f = &policydv1.Failure{}
	}
	if profile == "" {
		profile = DefaultProfile
	}
	fx := c.pool.Get().(*facts)
	fx.reset(c.nblocks)
	c.load(fx, f, opts, profile, now)

	out := &policydv1.Classification{}
	rule := c.match(fx)
	switch {
	case rule == nil && c.learnedIn[profile] && c.learned.answer(f, out, c.types):
		// answered by the learned fallback
	case rule == nil:
		out.FailureType = policydv1.FailureType_FAILURE_TYPE_UNKNOWN
		out.Rule = RuleUnknown
		out.Reason = "no rule recognised the failure"
		out.RecoveryAction = "Inspect the error; policyd does not recognise it and does not retry it."
	default:
		res := &rule.result
		out.FailureType = res.failureType
		out.Retryable = res.retryable
		out.Rule = rule.id
		out.Reason, out.RecoveryAction = res.reason, res.recovery
		if res.templated {
			out.Reason, out.RecoveryAction = expand(res.reason, f), expand(res.recovery, f)
		}
		out.ContinuationPrompt = res.continuation
		if res.window > 0 && fx.hint.source == hintNone {
			fx.hint = delayHint{delay: res.window, source: hintWindow}
		}
	}
	if fx.shouldRetry != 0 {
		applyShouldRetry(out, fx.shouldRetry, f, RuleShouldRetryHeader, "x-should-retry")
	} else {
		applyShouldRetry(out, fx.retryFlag, f, RuleServerRetryableFlag, "the response's retryable flag")
	}
	if fx.pushbackStop && out.Retryable {
		out.Reason = "grpc-retry-pushback-ms asks not to retry; overrides rule " + out.Rule + " (" + out.Reason + ")"
		out.Rule = RulePushbackStop
		out.Retryable = false
		out.RecoveryAction = "Do not retry; the server's pushback asked the client to stop."
	}
	if fx.hint.source != hintNone {
		out.RetryAfter = durationpb.New(fx.hint.delay)
		out.RetryAfterSource = hintSourceNames[fx.hint.source]
	}
	fx.f = nil
	c.pool.Put(fx)
	return out
}

// applyShouldRetry lets the server's x-should-retry header override the
// decision for a failure that got an HTTP response (Stainless SDK semantics).
func applyShouldRetry(out *policydv1.Classification, shouldRetry int8, f *policydv1.Failure, rule, what string) {
	if shouldRetry == 0 || f.GetHttpStatus() == 0 || out.FailureType == policydv1.FailureType_FAILURE_TYPE_CANCELED {
		return
	}
	want := shouldRetry > 0
	if want == out.Retryable {
		return
	}
	out.Reason = what + ": " + strconv.FormatBool(want) + " overrides rule " + out.Rule + " (" + out.Reason + ")"
	out.Rule = rule
	out.Retryable = want
	if want {
		out.RecoveryAction = "Retry with backoff; the server asked for a retry."
	} else {
		out.RecoveryAction = "Do not retry; the server said this request should not be retried."
	}
}

// expand fills in {status} and {provider}.
func expand(s string, f *policydv1.Failure) string {
	if !strings.Contains(s, "{") {
		return s
	}
	return strings.NewReplacer(
		"{status}", strconv.Itoa(int(f.GetHttpStatus())),
		"{provider}", f.GetProvider(),
	).Replace(s)
}

// match returns the first rule with a matching block, or nil.
func (c *Classifier) match(fx *facts) *compiledRule {
	for i := range c.rules {
		r := &c.rules[i]
		for j := range r.blocks {
			if r.blocks[j].matches(fx) {
				return r
			}
		}
	}
	return nil
}

func (b *block) matches(fx *facts) bool {
	f := fx.f
	if b.options != 0 && fx.options&b.options != b.options {
		return false
	}
	if b.hint != 0 && (fx.hint.source != hintNone) != (b.hint > 0) {
		return false
	}
	if len(b.profiles) > 0 && !containsFold(b.profiles, fx.profile) {
		return false
	}
	if len(b.phases) > 0 && !containsPhase(b.phases, f.GetPhase()) {
		return false
	}
	if len(b.statuses) > 0 && !inRanges(b.statuses, fx.status) {
		return false
	}
	if len(b.grpcCodes) > 0 && !containsInt(b.grpcCodes, fx.grpc) {
		return false
	}
	if len(b.providers) > 0 && !matchAny(b.providers, fx.provider) {
		return false
	}
	if len(b.operations) > 0 && !matchAny(b.operations, fx.op) {
		return false
	}
	if b.hasKind && !fx.kindHits.has(b.index) {
		return false
	}
	if b.hasCode && !fx.codeHits.has(b.index) {
		return false
	}
	if b.hasName && !fx.nameHits.has(b.index) {
		return false
	}
	if len(b.message) > 0 && !containsAny(fx.text[:fx.split], &fx.bigrams, b.message) {
		return false
	}
	if len(b.body) > 0 && !containsAny(fx.text[fx.split+1:], &fx.bigrams, b.body) {
		return false
	}
	if len(b.text) > 0 && !containsAny(fx.text, &fx.bigrams, b.text) {
		return false
	}
	return true
}

func containsAny(text []byte, bigrams *bigramSet, subs []substring) bool {
	for i := range subs {
		sub := &subs[i]
		// The test most phrases fail, here rather than behind a call.
		if bigrams[sub.firstWord]&sub.firstBit != 0 && sub.in(text, bigrams) {
			return true
		}
	}
	return false
}

func containsFold(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}

func containsPhase(list []policydv1.Phase, p policydv1.Phase) bool {
	for _, v := range list {
		if v == p {
			return true
		}
	}
	return false
}

func containsInt(list []int32, v int32) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func inRanges(ranges []statusRange, s int32) bool {
	for _, r := range ranges {
		if s >= r.lo && s <= r.hi {
			return true
		}
	}
	return false
}
