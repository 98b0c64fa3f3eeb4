package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// durableServer is the echo with the cheapest durable acknowledgement on the
// machine: each request's payload is appended to a local file, and the
// answer goes out only once the file is fdatasynced. Requests in flight
// share one sync (a group commit, as PostgreSQL's WAL writer and the
// journal's batches do), so its throughput is the floor any durable journal
// here can reach: journaled/durable says how far policyd's is from it.
type durableServer struct {
	testgrpc.UnimplementedTestServiceServer
	appends chan durableAppend
}

type durableAppend struct {
	data []byte
	done chan error
}

func newDurableServer(dir string) (*durableServer, error) {
	f, err := os.OpenFile(filepath.Join(dir, "durable.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("durable echo: %w", err)
	}
	s := &durableServer{appends: make(chan durableAppend, 4096)}
	go s.commit(f)
	return s, nil
}

// commit writes and syncs whatever is queued, one fdatasync per group: the
// first append waits for nothing, the ones that arrive during a sync go in
// the next group together.
func (s *durableServer) commit(f *os.File) {
	var group []durableAppend
	var buf []byte
	for first := range s.appends {
		group, buf = append(group[:0], first), append(buf[:0], first.data...)
	drain:
		for {
			select {
			case a := <-s.appends:
				group, buf = append(group, a), append(buf, a.data...)
			default:
				break drain
			}
		}
		_, err := f.Write(buf)
		if err == nil {
			err = syscall.Fdatasync(int(f.Fd()))
		}
		for _, a := range group {
			a.done <- err
		}
	}
}

func (s *durableServer) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	done := make(chan error, 1)
	s.appends <- durableAppend{data: req.GetPayload().GetBody(), done: done}
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: make([]byte, req.GetResponseSize())}}, nil
}
