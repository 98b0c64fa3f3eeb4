package classifier

import (
	"strings"
	"testing"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// testNow is the fixed clock of every classifier test.
var testNow = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func newTestClassifier(t testing.TB) *Classifier {
	t.Helper()
	c, err := New(DefaultRuleSet(), WithClock(func() time.Time { return testNow }))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

// classifyCase is one row of a seed's decision table (docs/seeds.md).
type classifyCase struct {
	name          string
	failure       *policydv1.Failure
	options       *policydv1.ClassifyOptions
	profile       string
	wantType      policydv1.FailureType
	wantRetryable bool
	wantRule      string // the rule that must match: every case names it
	wantRecovery  string // checked when set
}

func runClassifyCases(t *testing.T, cases []classifyCase) {
	t.Helper()
	c := newTestClassifier(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := c.Classify(tc.failure, tc.options, tc.profile)
			if got.GetFailureType() != tc.wantType || got.GetRetryable() != tc.wantRetryable {
				t.Errorf("got %v retryable=%v (rule %q), want %v retryable=%v",
					got.GetFailureType(), got.GetRetryable(), got.GetRule(), tc.wantType, tc.wantRetryable)
			}
			if tc.wantRule == "" {
				t.Errorf("the case asserts no rule; it matched %q", got.GetRule())
			} else if got.GetRule() != tc.wantRule {
				t.Errorf("rule = %q, want %q", got.GetRule(), tc.wantRule)
			}
			if tc.wantRecovery != "" && got.GetRecoveryAction() != tc.wantRecovery {
				t.Errorf("recovery = %q, want %q", got.GetRecoveryAction(), tc.wantRecovery)
			}
			if got.GetRule() == "" || strings.TrimSpace(got.GetRecoveryAction()) == "" {
				t.Errorf("every answer needs a rule and a recovery action, got rule=%q recovery=%q", got.GetRule(), got.GetRecoveryAction())
			}
		})
	}
}

// nest wraps a cause with code at the given depth of a cause chain.
func nest(depth int, name, code string) []*policydv1.Cause {
	causes := make([]*policydv1.Cause, 0, depth+1)
	for i := 0; i < depth; i++ {
		causes = append(causes, &policydv1.Cause{Name: "Error", Message: "wrapped"})
	}
	return append(causes, &policydv1.Cause{Name: name, Code: code, Message: "socket failure"})
}

const (
	typeRateLimit      = policydv1.FailureType_FAILURE_TYPE_RATE_LIMIT
	typeQuota          = policydv1.FailureType_FAILURE_TYPE_QUOTA_EXHAUSTED
	typeOverloaded     = policydv1.FailureType_FAILURE_TYPE_OVERLOADED
	typeServerError    = policydv1.FailureType_FAILURE_TYPE_SERVER_ERROR
	typeTimeout        = policydv1.FailureType_FAILURE_TYPE_TIMEOUT
	typeConnection     = policydv1.FailureType_FAILURE_TYPE_CONNECTION_ERROR
	typeStreamCut      = policydv1.FailureType_FAILURE_TYPE_STREAM_INTERRUPTED
	typeInvalidStream  = policydv1.FailureType_FAILURE_TYPE_INVALID_STREAM
	typeAuth           = policydv1.FailureType_FAILURE_TYPE_AUTH_INVALID
	typePermission     = policydv1.FailureType_FAILURE_TYPE_PERMISSION_DENIED
	typeContextTooLong = policydv1.FailureType_FAILURE_TYPE_CONTEXT_TOO_LONG
	typeInvalidRequest = policydv1.FailureType_FAILURE_TYPE_INVALID_REQUEST
	typeContentPolicy  = policydv1.FailureType_FAILURE_TYPE_CONTENT_POLICY
	typeNotFound       = policydv1.FailureType_FAILURE_TYPE_NOT_FOUND
	typeUnsupported    = policydv1.FailureType_FAILURE_TYPE_UNSUPPORTED
	typeCanceled       = policydv1.FailureType_FAILURE_TYPE_CANCELED
	typeTaskTransient  = policydv1.FailureType_FAILURE_TYPE_TASK_TRANSIENT
	typeTaskFatal      = policydv1.FailureType_FAILURE_TYPE_TASK_FATAL
	typeUnknown        = policydv1.FailureType_FAILURE_TYPE_UNKNOWN
)

var (
	fetchErrorsOn  = &policydv1.ClassifyOptions{RetryFetchErrors: true}
	fetchErrorsOff = &policydv1.ClassifyOptions{RetryFetchErrors: false}
)
