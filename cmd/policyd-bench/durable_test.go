package main

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// The durable echo answers only what is in its file: every payload of
// concurrent requests is there, whole, once they are answered.
func TestDurableEchoWritesBeforeAnswering(t *testing.T) {
	dir := t.TempDir()
	s, err := newDurableServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	payload := []byte("0123456789abcdef")
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, err := s.UnaryCall(context.Background(), &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: payload}, ResponseSize: 8})
			if err != nil || len(resp.GetPayload().GetBody()) != 8 {
				t.Errorf("UnaryCall: %v %v", resp, err)
			}
		})
	}
	wg.Wait()
	b, err := os.ReadFile(filepath.Join(dir, "durable.log"))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != n*len(payload) {
		t.Fatalf("%d bytes on disk after %d answers of %d bytes", len(b), n, len(payload))
	}
}
