package server

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// testServer is a daemon as this package's tests run it: ps's three
// services on 127.0.0.1:0, with the background parts the composition root
// starts (the fleet's clock, the journal's health watcher), and a
// plaintext client connection.
type testServer struct {
	addr string
	gs   *grpc.Server
	hs   *Health
	conn *grpc.ClientConn
}

// serveTest serves ps until tb ends: logs go to logger (nil: discarded),
// opts configure the gRPC server. Stop is idempotent; the test's clean-up
// stops the server and the background parts, and closes the connection.
func serveTest(tb testing.TB, ps *PolicyServer, logger *slog.Logger, opts ...GRPCOption) *testServer {
	tb.Helper()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	gs, hs := NewGRPCServer(ps, NewJournalServer(ps.journal, ps), NewFleetServer(ps.fleet, ps, WithIncidentJournal(ps.journal)), logger, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if ps.fleet != nil {
		wg.Go(func() { ps.fleet.Run(ctx) })
	}
	wg.Go(func() { WatchJournal(ctx, hs, ps.journal) })
	go gs.Serve(lis) //nolint:errcheck // Serve returns nil after Stop.
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = conn.Close()
		gs.Stop()
		cancel()
		wg.Wait()
	})
	return &testServer{addr: lis.Addr().String(), gs: gs, hs: hs, conn: conn}
}

// agents gives each client id a connection of its own, as separate agent
// processes have: the fleet counts distinct clients by connection (and
// identity), so one connection's calls under three ids are one client.
type agents struct {
	tb    testing.TB
	addr  string
	conns map[string]*grpc.ClientConn
}

func newAgents(tb testing.TB, addr string) *agents {
	return &agents{tb: tb, addr: addr, conns: map[string]*grpc.ClientConn{}}
}

// policy is client's PolicyService client, on its own connection.
func (a *agents) policy(client string) policydv1.PolicyServiceClient {
	a.tb.Helper()
	conn := a.conns[client]
	if conn == nil {
		conn = dialT(a.tb, a.addr, insecure.NewCredentials())
		a.conns[client] = conn
	}
	return policydv1.NewPolicyServiceClient(conn)
}
