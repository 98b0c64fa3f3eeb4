package policyd

import (
	"context"
	"strings"
	"testing"
)

func TestIsLoopbackTarget(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:7433": true, "127.1.2.3:1": true, "[::1]:7433": true, "localhost:7433": true,
		"dns:///localhost:7433": true, "unix:///run/policyd.sock": true,
		"10.0.0.1:7433": false, "policyd.internal:7433": false, "dns:///policyd:7433": false, "[2001:db8::1]:1": false,
	} {
		if got := isLoopbackTarget(addr); got != want {
			t.Errorf("isLoopbackTarget(%q) = %v, want %v", addr, got, want)
		}
	}
}

// Over a connection without privacy the token goes to loopback only.
func TestBearerTokenPlaintext(t *testing.T) {
	t.Parallel()
	const tok = "secret-token-0000000000"
	md, err := (&bearerToken{header: "Bearer " + tok, addr: "127.0.0.1:7433", loopback: true}).GetRequestMetadata(context.Background())
	if err != nil || md["authorization"] != "Bearer "+tok {
		t.Errorf("loopback: %v, %v; want the authorization header", md, err)
	}
	_, err = (&bearerToken{header: "Bearer " + tok, addr: "10.0.0.1:7433"}).GetRequestMetadata(context.Background())
	if err == nil || !strings.Contains(err.Error(), "not sending the bearer token in plaintext") || strings.Contains(err.Error(), tok) {
		t.Errorf("remote plaintext: %v, want a refusal that does not quote the token", err)
	}
}
