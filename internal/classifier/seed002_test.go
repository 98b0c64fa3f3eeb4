package classifier

import (
	"testing"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// Seed 002 (docs/seeds.md): every task runner error code in its table, and unknown codes,
// which are transient.
func TestSeed002TaskCodes(t *testing.T) {
	t.Parallel()
	task := func(code string) *policydv1.Failure {
		return &policydv1.Failure{Operation: "task", ErrorCode: code, Message: "task TASK-001 failed"}
	}
	runClassifyCases(t, []classifyCase{
		{name: "RATE_LIMIT", failure: task("RATE_LIMIT"), wantType: typeRateLimit, wantRetryable: true, wantRule: "task.rate_limit"},
		{name: "TEST_FAILURE", failure: task("TEST_FAILURE"), wantType: typeTaskTransient, wantRetryable: true, wantRule: "task.transient"},
		{name: "LINT_FAILURE", failure: task("LINT_FAILURE"), wantType: typeTaskTransient, wantRetryable: true, wantRule: "task.transient"},
		{name: "TASK_FAILED", failure: task("TASK_FAILED"), wantType: typeTaskTransient, wantRetryable: true, wantRule: "task.transient"},
		{name: "TIMEOUT", failure: task("TIMEOUT"), wantType: typeTaskTransient, wantRetryable: true, wantRule: "task.transient"},
		{name: "UNKNOWN", failure: task("UNKNOWN"), wantType: typeTaskTransient, wantRetryable: true, wantRule: "task.transient"},
		{name: "HOOK_FAILURE", failure: task("HOOK_FAILURE"), wantType: typeTaskFatal, wantRetryable: false, wantRule: "task.fatal"},
		{name: "REVIEW_REJECTED", failure: task("REVIEW_REJECTED"), wantType: typeTaskFatal, wantRetryable: false, wantRule: "task.fatal"},
		{name: "BUDGET_EXCEEDED", failure: task("BUDGET_EXCEEDED"), wantType: typeTaskFatal, wantRetryable: false, wantRule: "task.fatal"},
		{name: "INTERRUPTED", failure: task("INTERRUPTED"), wantType: typeTaskFatal, wantRetryable: false, wantRule: "task.fatal"},
		{name: "unknown code", failure: task("SOMETHING_NEW"), wantType: typeTaskTransient, wantRetryable: true, wantRule: "task.other"},
		{name: "no code", failure: task(""), wantType: typeTaskTransient, wantRetryable: true, wantRule: "task.other"},
		{name: "task_runner profile", profile: "task_runner", failure: task("HOOK_FAILURE"), wantType: typeTaskFatal, wantRetryable: false, wantRule: "task.fatal"},
		{name: "sub-operation", failure: &policydv1.Failure{Operation: "task.execute", ErrorCode: "TIMEOUT"},
			wantType: typeTaskTransient, wantRetryable: true, wantRule: "task.transient"},
	})
}
