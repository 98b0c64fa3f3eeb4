package policyd

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), errPlaintextToken) || strings.Contains(err.Error(), tok) {
		t.Errorf("remote plaintext: %v, want an UNAUTHENTICATED refusal that does not quote the token", err)
	}
	aerr := &AuthError{Method: "NextDelay", Err: err, TokenSet: true}
	if !strings.Contains(aerr.Error(), "use TLS") || strings.Contains(aerr.Error(), "not in the daemon's") {
		t.Errorf("AuthError = %q, want it to say use TLS and nothing about the tokens file", aerr)
	}
}

func TestDialRefusesPlaintextTokenBeyondLoopback(t *testing.T) {
	t.Parallel()
	const tok = "secret-token-0000000000"
	if _, err := Dial("10.0.0.1:7433", WithToken(tok)); err == nil || !strings.Contains(err.Error(), errPlaintextToken) || strings.Contains(err.Error(), tok) {
		t.Errorf("Dial = %v, want a refusal that does not quote the token", err)
	}
	c, err := Dial("10.0.0.1:7433", WithToken(tok), WithTLS(""))
	if err != nil {
		t.Fatalf("Dial with TLS: %v", err)
	}
	c.Close()
}
