package server

import (
	"context"

	"google.golang.org/grpc/peer"

	"github.com/policyd/policyd/internal/auth"
	"github.com/policyd/policyd/internal/fleet"
)

// origin is who calls: the authenticated identity and the connection's
// address. The fleet counts distinct clients by it (a process cannot pass
// for three under three client ids) and journals it with its events.
func origin(ctx context.Context) fleet.Origin {
	o := fleet.Origin{Identity: auth.IdentityFrom(ctx)}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		o.Peer = p.Addr.String()
	}
	return o
}
