package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// echoServer is the baseline: a bare grpc-go server, no interceptors, whose
// one unary method returns a payload of the requested size. Its cost is the
// floor of a unary call on this machine.
type echoServer struct {
	testgrpc.UnimplementedTestServiceServer
}

func (echoServer) UnaryCall(_ context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: make([]byte, req.GetResponseSize())}}, nil
}

// serveEcho runs the baseline in this process until SIGTERM or SIGINT,
// announcing its address on stderr the way policyd serve does; with
// durableDir, the durable echo (durableServer) writing there.
func serveEcho(listen, durableDir string) error {
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("echo: %w", err)
	}
	gs := grpc.NewServer()
	if durableDir != "" {
		ds, err := newDurableServer(durableDir)
		if err != nil {
			return err
		}
		testgrpc.RegisterTestServiceServer(gs, ds)
	} else {
		testgrpc.RegisterTestServiceServer(gs, echoServer{})
	}
	fmt.Fprintf(os.Stderr, `{"msg":"serving","addr":%q}`+"\n", lis.Addr().String())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sig; gs.Stop() }()
	return gs.Serve(lis)
}
