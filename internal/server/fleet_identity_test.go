package server

import (
	"testing"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

func TestOneConnectionUnderThreeNamesIsOneClient(t *testing.T) {
	t.Parallel()
	h := newFleetHarness(t)
	// One process, three made-up client ids: not three clients.
	for i := range 20 {
		f := overloaded503()
		f.Provider, f.Model, f.KeyId = "openai", "o1", "prod"
		nextDelay(t, h.client, &policydv1.NextDelayRequest{Failure: f, Attempt: 1, Profile: "solo", ClientId: []string{"a", "b", "c"}[i%3]})
	}
	b, err := h.fleet.GetBucket(testContext(t), &policydv1.GetBucketRequest{Bucket: "availability:openai/o1"})
	if err != nil {
		t.Fatal(err)
	}
	if b.GetBucket().GetState().GetBreaker() != policydv1.BreakerState_BREAKER_STATE_CLOSED || b.GetBucket().GetWindowClients() != 1 {
		t.Fatalf("breaker %v with %d clients; want closed, one client", b.GetBucket().GetState().GetBreaker(), b.GetBucket().GetWindowClients())
	}
	// Three processes open it.
	for i := range 20 {
		h.decide([]string{"a", "b", "c"}[i%3], "solo", "o1", overloaded503())
	}
	b, err = h.fleet.GetBucket(testContext(t), &policydv1.GetBucketRequest{Bucket: "availability:openai/o1"})
	if err != nil || b.GetBucket().GetState().GetBreaker() != policydv1.BreakerState_BREAKER_STATE_OPEN {
		t.Fatalf("three connections: %v, %v; want open", b.GetBucket().GetState(), err)
	}
}
