package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

func TestAuthenticateToken(t *testing.T) {
	t.Parallel()
	tokens, err := ParseTokens(strings.NewReader("acme "+tokA+"\n"), "f")
	if err != nil {
		t.Fatal(err)
	}
	a := NewTokenAuthenticator(tokens)
	tests := []struct {
		name       string
		md         metadata.MD
		wantTenant string
		wantErr    string
	}{
		{name: "valid", md: metadata.Pairs("authorization", "Bearer "+tokA), wantTenant: "acme"},
		{name: "scheme case-insensitive", md: metadata.Pairs("authorization", "bearer "+tokA), wantTenant: "acme"},
		{name: "no metadata", wantErr: "missing bearer token"},
		{name: "other header", md: metadata.Pairs("x-token", tokA), wantErr: "missing bearer token"},
		{name: "basic", md: metadata.Pairs("authorization", "Basic "+tokA), wantErr: "must be \"Bearer TOKEN\""},
		{name: "no scheme", md: metadata.Pairs("authorization", tokA), wantErr: "must be \"Bearer TOKEN\""},
		{name: "unknown", md: metadata.Pairs("authorization", "Bearer "+tokB), wantErr: "invalid bearer token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := metadata.NewIncomingContext(context.Background(), tt.md)
			got, err := a.Authenticate(ctx)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want ErrUnauthenticated saying %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), tokA) || strings.Contains(err.Error(), tokB) {
					t.Errorf("error %q reveals a token", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if TenantFrom(got) != tt.wantTenant {
				t.Errorf("tenant = %q, want %q", TenantFrom(got), tt.wantTenant)
			}
		})
	}
	t.Run("SetTokens", func(t *testing.T) {
		t.Parallel()
		b := NewTokenAuthenticator(tokens)
		rotated, err := ParseTokens(strings.NewReader("beta "+tokB+"\n"), "f")
		if err != nil {
			t.Fatal(err)
		}
		b.SetTokens(rotated)
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+tokA))
		if _, err := b.Authenticate(ctx); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("old token after SetTokens: %v, want ErrUnauthenticated", err)
		}
	})
}

func TestAuthenticateCert(t *testing.T) {
	t.Parallel()
	a := NewCertAuthenticator()
	withCN := func(cn string) context.Context {
		cert := &x509.Certificate{Subject: pkix.Name{CommonName: cn}}
		return peer.NewContext(context.Background(), &peer.Peer{
			Addr:     &net.TCPAddr{},
			AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}}},
		})
	}
	tests := []struct {
		name       string
		ctx        context.Context
		wantTenant string
		wantErr    string
	}{
		{name: "CN", ctx: withCN("agent-runner"), wantTenant: "agent-runner"},
		{name: "CN with a space", ctx: withCN("agent runner"), wantErr: "not a valid tenant name"},
		{name: "empty CN", ctx: withCN(""), wantErr: "not a valid tenant name"},
		{name: "no peer", ctx: context.Background(), wantErr: "no verified client certificate"},
		{name: "plaintext peer", ctx: peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{}}), wantErr: "no verified client certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := a.Authenticate(tt.ctx)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want ErrUnauthenticated saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if TenantFrom(got) != tt.wantTenant {
				t.Errorf("tenant = %q, want %q", TenantFrom(got), tt.wantTenant)
			}
		})
	}
}
