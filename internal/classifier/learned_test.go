package classifier

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// learnedExamples is a small labelled set: busy servers (retried), spent
// credits (not retried), and failures every class shares words with.
func learnedExamples() []Example {
	yes, no := true, false
	ex := func(msg string, retryable *bool, t policydv1.FailureType) Example {
		return Example{Failure: &policydv1.Failure{Message: msg}, Retryable: retryable, Type: t}
	}
	return []Example{
		ex("the reactor is busy, come back later", &yes, typeOverloaded),
		ex("reactor busy: please come back later", &yes, typeOverloaded),
		ex("our reactor is busy right now", &yes, typeOverloaded),
		ex("the error: reactor busy", &yes, typeOverloaded),
		ex("the error: your credits are spent, top up your wallet", &no, typeQuota),
		ex("credits spent: top up the wallet to continue", &no, typeQuota),
		ex("wallet empty, credits spent", &no, typeQuota),
		ex("the error: wallet credits spent", &no, typeQuota),
		// A type no words may guess, however often it is labelled.
		ex("the caller aborted the reactor call", &no, typeCanceled),
		ex("the caller aborted the reactor call again", &no, typeCanceled),
	}
}

func learnedClassifier(t *testing.T, m *Model) *Classifier {
	t.Helper()
	c, err := New(DefaultRuleSet(), WithClock(func() time.Time { return testNow }), WithLearnedFallback(m, DefaultProfile))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestLearnedFallbackAnswersFromTellingWords(t *testing.T) {
	t.Parallel()
	c := learnedClassifier(t, Train(learnedExamples()))
	tests := []struct {
		name      string
		message   string
		wantType  policydv1.FailureType
		retryable bool
		rule      string
		evidence  string
	}{
		{"words of busy servers", "ERR: reactor busy, retry later", typeOverloaded, true, RuleLearned, `"busy"`},
		{"words of spent credits", "credits spent; wallet needs a top up", typeQuota, false, RuleLearned, `"spent"`},
		{"words every class shares tell nothing", "the error", typeUnknown, false, RuleUnknown, ""},
		{"one telling word is not enough", "wallet", typeUnknown, false, RuleUnknown, ""},
		{"words the model never saw", "the flux capacitor is out of sync", typeUnknown, false, RuleUnknown, ""},
		{"a type no words may guess is never answered", "the caller aborted the call, credits spent", typeQuota, false, RuleLearned, ""},
		{"rules come first", "429 Too Many Requests: reactor busy", typeRateLimit, true, "rate_limit", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := c.Classify(&policydv1.Failure{Message: tc.message}, nil, "")
			if got.GetFailureType() != tc.wantType || got.GetRetryable() != tc.retryable || got.GetRule() != tc.rule {
				t.Fatalf("got %v retryable=%v rule=%q (%s); want %v retryable=%v rule=%q",
					got.GetFailureType(), got.GetRetryable(), got.GetRule(), got.GetReason(), tc.wantType, tc.retryable, tc.rule)
			}
			if !strings.Contains(got.GetReason(), tc.evidence) || got.GetRecoveryAction() == "" {
				t.Errorf("reason %q should name %s, with a recovery action (%q)", got.GetReason(), tc.evidence, got.GetRecoveryAction())
			}
		})
	}
}

// Words common to every class are known but not telling.
func TestTellingWords(t *testing.T) {
	t.Parallel()
	m := Train(learnedExamples())
	for msg, want := range map[string]int{"the error": 0, "reactor busy later": 4, "flux capacitor": 0} {
		if got := m.retryable.tellingWords(Features(&policydv1.Failure{Message: msg})); got != want {
			t.Errorf("%q: %d telling words, want %d", msg, got, want)
		}
	}
}

// The fallback answers only in the profiles that turn it on.
func TestLearnedFallbackIsPerProfile(t *testing.T) {
	t.Parallel()
	c := learnedClassifier(t, Train(learnedExamples()))
	f := &policydv1.Failure{Message: "reactor busy, come back later"}
	if got := c.Classify(f, nil, DefaultProfile); got.GetRule() != RuleLearned {
		t.Errorf("default profile: rule %q, want %q", got.GetRule(), RuleLearned)
	}
	if got := c.Classify(f, nil, "agent_cli"); got.GetRule() != RuleUnknown || got.GetRetryable() {
		t.Errorf("agent_cli: %v retryable=%v rule %q, want UNKNOWN, not retried", got.GetFailureType(), got.GetRetryable(), got.GetRule())
	}
	if got := newTestClassifier(t).Classify(f, nil, DefaultProfile); got.GetRule() != RuleUnknown {
		t.Errorf("without the option: rule %q, want %q", got.GetRule(), RuleUnknown)
	}
}

// The type answered agrees with the verdict: a retried failure gets a type
// whose examples are mostly retried, so a profile's strategy for the type
// does not undo the verdict.
func TestLearnedTypeAgreesWithVerdict(t *testing.T) {
	t.Parallel()
	m := Train(learnedExamples())
	for _, msg := range []string{"reactor busy later", "credits spent wallet"} {
		out := &policydv1.Classification{}
		if !m.answer(&policydv1.Failure{Message: msg}, out, nil) {
			t.Fatalf("%q: no answer", msg)
		}
		if retriedType := out.GetFailureType() == typeOverloaded; retriedType != out.GetRetryable() {
			t.Errorf("%q: type %v with retryable=%v", msg, out.GetFailureType(), out.GetRetryable())
		}
	}
	// Type-only examples that tie the words of spent credits to a retried
	// type: the verdict (not retried) still picks a stopped type.
	ex := learnedExamples()
	for range 30 {
		ex = append(ex, Example{Failure: &policydv1.Failure{Message: "credits spent wallet"}, Type: typeOverloaded})
	}
	skewed := Train(ex)
	out := &policydv1.Classification{}
	if !skewed.answer(&policydv1.Failure{Message: "credits spent wallet"}, out, nil) || out.GetRetryable() || out.GetFailureType() != typeQuota {
		t.Errorf("skewed types: %v retryable=%v (%s), want QUOTA_EXHAUSTED, not retried", out.GetFailureType(), out.GetRetryable(), out.GetReason())
	}
	if best := skewed.types.predict(singleWords(Features(&policydv1.Failure{Message: "credits spent wallet"})), nil); best.class != "OVERLOADED" {
		t.Fatalf("the skewed type model's own best is %q; the case needs OVERLOADED", best.class)
	}
	// Words of busy servers, with only the stopped types allowed.
	quota := slices.Index(m.types.classes, "QUOTA_EXHAUSTED")
	got := m.types.predict(singleWords(Features(&policydv1.Failure{Message: "reactor busy later"})), func(y int) bool { return !m.retried[y] })
	if got.class != "QUOTA_EXHAUSTED" || quota < 0 {
		t.Errorf("with only stopped types allowed: %q, want QUOTA_EXHAUSTED", got.class)
	}
	if slices.Contains(m.types.classes, "CANCELED") {
		t.Errorf("type classes %q hold CANCELED, which is never guessed", m.types.classes)
	}
}

func TestLearnedModelRoundTrips(t *testing.T) {
	t.Parallel()
	m := Train(learnedExamples())
	var buf bytes.Buffer
	if _, err := m.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	parsed, err := ParseModel(buf.Bytes())
	if err != nil {
		t.Fatalf("ParseModel: %v\n%s", err, buf.String())
	}
	var again bytes.Buffer
	if _, err := parsed.WriteTo(&again); err != nil {
		t.Fatal(err)
	}
	if again.String() != buf.String() {
		t.Errorf("a parsed model writes differently:\n%s\nwant:\n%s", again.String(), buf.String())
	}
	for _, msg := range []string{"reactor busy later", "credits spent wallet", "the error"} {
		f := &policydv1.Failure{Message: msg}
		a, b := &policydv1.Classification{}, &policydv1.Classification{}
		okA, okB := m.answer(f, a, nil), parsed.answer(f, b, nil)
		if okA != okB || a.GetFailureType() != b.GetFailureType() || a.GetRetryable() != b.GetRetryable() || a.GetReason() != b.GetReason() {
			t.Errorf("%q: trained %v/%v/%q, parsed %v/%v/%q", msg, okA, a.GetFailureType(), a.GetReason(), okB, b.GetFailureType(), b.GetReason())
		}
	}
	if BuiltinModel() == nil {
		t.Fatal("no built-in model")
	}
}

func TestParseModelErrorsNameTheLine(t *testing.T) {
	t.Parallel()
	head := "retryable\tclasses\tfalse\ttrue\nretryable\ttotal\t1\t1\n"
	types := "type\tclasses\tOVERLOADED\ntype\ttotal\t1\ntype\tretried\t1\ntype\tstopped\t0\n"
	tests := []struct{ name, doc, want string }{
		{"unknown part", "weights\tclasses\ta\n", "line 1: want retryable|type"},
		{"counts for too few classes", head + "retryable\tf\tbusy\t1\n" + types, "line 3: 1 counts for 2 classes"},
		{"a count that is not a number", head + "retryable\tf\tbusy\t1\tx\n" + types, `line 3: count "x" is not a whole number`},
		{"unknown kind", head + "retryable\tweight\t1\t1\n", `line 3: unknown kind "weight"`},
		{"no totals", "retryable\tclasses\tfalse\ttrue\n" + types, "retryable: no classes or totals"},
		{"other verdicts", "retryable\tclasses\tno\tyes\nretryable\ttotal\t1\t1\n" + types, `classes ["no" "yes"], want false and true`},
		{"not a failure type", head + "type\tclasses\tBUSY\ntype\ttotal\t1\ntype\tretried\t1\ntype\tstopped\t0\n", `"BUSY" is not a failure type`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseModel([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestFeatures(t *testing.T) {
	t.Parallel()
	got := Features(&policydv1.Failure{HttpStatus: 429, GrpcCode: 8, Phase: policydv1.Phase_PHASE_MID_STREAM,
		Message: "Rate-limit hit: 429 x 12345 a7 7a", Causes: []*policydv1.Cause{{Message: "rate_limit hit"}}})
	want := []string{"status:429", "status:4xx", "grpc:8", "phase:mid_stream", "rate_limit", "hit", "rate_limit hit", "429", "hit 429", "a7", "429 a7"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("Features = %q\nwant       %q", got, want)
	}
}
