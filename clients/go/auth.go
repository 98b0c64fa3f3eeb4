package policyd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// Environment variables read by Dial when the matching option is not given.
const (
	// EnvToken holds the bearer token sent as "authorization: Bearer TOKEN"
	// (a daemon started with --auth-tokens requires one).
	EnvToken = "POLICYD_TOKEN"
	// EnvTLSCA names a PEM file of CA certificates to verify the daemon
	// with; setting it turns TLS on.
	EnvTLSCA = "POLICYD_TLS_CA"
	// EnvTLSCert and EnvTLSKey name the PEM client certificate and key for
	// mutual TLS; setting them turns TLS on.
	EnvTLSCert = "POLICYD_TLS_CERT"
	EnvTLSKey  = "POLICYD_TLS_KEY"
)

// ErrUnauthenticated is matched (errors.Is) by the error of a call the
// daemon answered UNAUTHENTICATED: no token, an unknown token, or no valid
// client certificate. It is a configuration error, so the client does not
// fail open on it: Do stops and returns it, Classify returns it.
var ErrUnauthenticated = errors.New("policyd: the daemon refused the client's credentials")

// AuthError is the daemon's UNAUTHENTICATED answer to a call, with what to
// do about it. It never contains the token.
type AuthError struct {
	// Method is the RPC the daemon refused, e.g. "NextDelay".
	Method string
	// Err is the gRPC status error the daemon answered.
	Err error
	// TokenSet reports whether the client sent a token.
	TokenSet bool
}

func (e *AuthError) Error() string {
	msg := status.Convert(e.Err).Message()
	if strings.Contains(msg, errPlaintextToken) {
		return fmt.Sprintf("policyd: %s: %s", e.Method, msg) // the client's own refusal says what to do
	}
	hint := "set " + EnvToken + " (or WithToken) to a token of the daemon's --auth-tokens file"
	if e.TokenSet {
		hint = "the token sent (" + EnvToken + " or WithToken) is not in the daemon's --auth-tokens file"
	}
	return fmt.Sprintf("policyd: %s: UNAUTHENTICATED: %s; %s", e.Method, msg, hint)
}

// errPlaintextToken starts the client's refusal to send a token in
// plaintext beyond loopback.
const errPlaintextToken = "not sending the bearer token in plaintext"

func plaintextTokenError(addr string) string {
	return fmt.Sprintf("%s to %s, which is not a loopback address: use TLS (WithTLS or %s)", errPlaintextToken, addr, EnvTLSCA)
}

// Unwrap returns ErrUnauthenticated and the status error.
func (e *AuthError) Unwrap() []error { return []error{ErrUnauthenticated, e.Err} }

// authError wraps err in an *AuthError when the daemon answered
// UNAUTHENTICATED, and returns nil otherwise.
func (c *Client) authError(method string, err error) *AuthError {
	if status.Code(err) != codes.Unauthenticated {
		return nil
	}
	return &AuthError{Method: method, Err: err, TokenSet: c.cfg.token != ""}
}

// WithToken makes token the bearer token sent with every call as
// "authorization: Bearer TOKEN" (default: $POLICYD_TOKEN; none when it is
// unset; WithToken("") sends none). Over plaintext the token is only sent
// to a loopback address; any other address needs TLS (WithTLS), else Dial
// returns an error.
func WithToken(token string) Option {
	return func(c *config) { c.token, c.tokenSet = token, true }
}

// WithTLS turns TLS on: the daemon's certificate is verified against the
// PEM CA certificates in caFile, or the system roots when caFile is empty
// (default: $POLICYD_TLS_CA; plaintext when neither is set).
func WithTLS(caFile string) Option {
	return func(c *config) { c.tls, c.tlsCA, c.tlsCASet = true, caFile, true }
}

// WithClientCert presents the PEM client certificate and key for mutual TLS
// (default: $POLICYD_TLS_CERT and $POLICYD_TLS_KEY); it turns TLS on.
func WithClientCert(certFile, keyFile string) Option {
	return func(c *config) { c.tls, c.tlsCert, c.tlsKey, c.tlsCertSet = true, certFile, keyFile, true }
}

// fromEnv fills what the options left unset from the environment.
func (c *config) fromEnv() {
	if !c.tokenSet {
		c.token = os.Getenv(EnvToken)
	}
	if !c.tlsCASet {
		if ca := os.Getenv(EnvTLSCA); ca != "" {
			c.tls, c.tlsCA = true, ca
		}
	}
	if !c.tlsCertSet {
		cert, key := os.Getenv(EnvTLSCert), os.Getenv(EnvTLSKey)
		if cert != "" || key != "" {
			c.tls, c.tlsCert, c.tlsKey = true, cert, key
		}
	}
}

// transportCredentials is the TLS configuration the options ask for.
func (c *config) transportCredentials() (credentials.TransportCredentials, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.tlsCA != "" {
		pem, err := os.ReadFile(c.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("TLS CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS CA %s: no PEM certificate found", c.tlsCA)
		}
		cfg.RootCAs = pool
	}
	if c.tlsCert != "" || c.tlsKey != "" {
		if c.tlsCert == "" || c.tlsKey == "" {
			return nil, fmt.Errorf("TLS client certificate: give both the certificate and the key (%s, %s)", EnvTLSCert, EnvTLSKey)
		}
		cert, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("TLS client certificate %s and key %s: %w", c.tlsCert, c.tlsKey, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(cfg), nil
}

// bearerToken sends the token with every call. It tells grpc-go that it
// does not require transport security (which would refuse it on any
// plaintext connection) and checks instead: over a connection without
// privacy it sends the token only to a loopback address. (Dial refuses the
// obvious case at once; this check also covers credentials given with
// WithDialOptions and targets that resolve elsewhere.)
type bearerToken struct {
	header   string // "Bearer TOKEN"
	addr     string
	loopback bool
}

func (b *bearerToken) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	if !b.loopback {
		ri, _ := credentials.RequestInfoFromContext(ctx)
		if credentials.CheckSecurityLevel(ri.AuthInfo, credentials.PrivacyAndIntegrity) != nil {
			// UNAUTHENTICATED, so that the client reports it rather than
			// failing open as grpc-go's UNAVAILABLE for other errors would.
			return nil, status.Error(codes.Unauthenticated, plaintextTokenError(b.addr))
		}
	}
	return map[string]string{"authorization": b.header}, nil
}

func (*bearerToken) RequireTransportSecurity() bool { return false }

// isLoopbackTarget reports whether the gRPC target addr is on this machine:
// a loopback IP, localhost, or a unix socket.
func isLoopbackTarget(addr string) bool {
	if strings.HasPrefix(addr, "unix:") || strings.HasPrefix(addr, "unix-abstract:") {
		return true
	}
	for _, scheme := range []string{"dns:///", "passthrough:///"} {
		addr = strings.TrimPrefix(addr, scheme)
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
