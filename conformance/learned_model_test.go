package conformance

import (
	"bytes"
	"os"
	"testing"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/cases"
	"github.com/policyd/policyd/internal/classifier"
)

const modelPath = "../internal/classifier/learned_model.tsv"

// examples are the cases' failures with their sources' labels (never
// policyd's documented answers): what the learned fallback is counted from.
func examples(all []*cases.Case) []classifier.Example {
	var out []classifier.Example
	for _, c := range all {
		if c.Failure == nil {
			continue
		}
		e := classifier.Example{Failure: c.Failure, Retryable: c.Expect.Retryable}
		if c.Expect.Type != "" {
			e.Type, _ = cases.FailureType(c.Expect.Type)
		}
		if e.Retryable != nil || e.Type != policydv1.FailureType_FAILURE_TYPE_UNSPECIFIED {
			out = append(out, e)
		}
	}
	return out
}

// TestLearnedModel keeps the built-in learned model counted from the cases
// as they are: go test ./conformance -run TestLearnedModel -update rewrites it.
func TestLearnedModel(t *testing.T) {
	// The cases alone, not load's policy: the policy parses the model this
	// test rewrites, which may be one an older format left.
	all := readCases(t)
	var want bytes.Buffer
	if _, err := classifier.Train(examples(all)).WriteTo(&want); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(modelPath)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(got, want.Bytes()) {
		return
	}
	if *update {
		if err := os.WriteFile(modelPath, want.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s is not counted from the cases as they are; run: go test ./conformance -run TestLearnedModel -update", modelPath)
}
