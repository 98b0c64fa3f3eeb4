package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// ErrUnauthenticated is the error of every failed authentication; the
// server answers it as UNAUTHENTICATED with the wrapping message, which
// never contains a token.
var ErrUnauthenticated = errors.New("unauthenticated")

var (
	errNoToken      = authError("missing bearer token: send metadata \"authorization: Bearer TOKEN\"")
	errBadScheme    = authError("the authorization metadata must be \"Bearer TOKEN\"")
	errUnknownToken = authError("invalid bearer token")
	errNoClientCert = authError("no verified client certificate")
	errBadCN        = authError("the client certificate's subject CN is not a valid tenant name (letters, digits and _.-@, at most 64)")
)

type unauthError struct{ msg string }

func authError(msg string) error            { return &unauthError{msg} }
func (e *unauthError) Error() string        { return e.msg }
func (e *unauthError) Is(target error) bool { return target == ErrUnauthenticated }

// Authenticator authenticates calls and puts the caller's tenant into their
// context. It is safe for concurrent use; SetTokens swaps the tokens while
// it serves.
type Authenticator struct {
	tokens   atomic.Pointer[Tokens]
	fromCert bool
}

// NewTokenAuthenticator returns an Authenticator that requires a bearer
// token of tokens.
func NewTokenAuthenticator(tokens *Tokens) *Authenticator {
	a := &Authenticator{}
	a.tokens.Store(tokens)
	return a
}

// NewCertAuthenticator returns an Authenticator whose tenant is the verified
// client certificate's subject CN (mutual TLS without a tokens file).
func NewCertAuthenticator() *Authenticator {
	return &Authenticator{fromCert: true}
}

// SetTokens replaces the tokens of a token Authenticator, e.g. on SIGHUP;
// calls in flight finish with the tokens they were checked against.
func (a *Authenticator) SetTokens(t *Tokens) { a.tokens.Store(t) }

// Authenticate returns ctx carrying the caller's tenant (WithTenant), or an
// error wrapping ErrUnauthenticated.
func (a *Authenticator) Authenticate(ctx context.Context) (context.Context, error) {
	if t := a.tokens.Load(); t != nil {
		tok, err := bearer(ctx)
		if err != nil {
			return nil, err
		}
		tenant, ok := t.Lookup(tok)
		if !ok {
			return nil, errUnknownToken
		}
		return WithIdentity(WithTenant(ctx, tenant), tokenIdentity(tok)), nil
	}
	if a.fromCert {
		tenant, serial, err := certTenant(ctx)
		if err != nil {
			return nil, err
		}
		return WithIdentity(WithTenant(ctx, tenant), "cert:"+tenant+"/"+serial), nil
	}
	return ctx, nil
}

// bearer is the token of the call's "authorization: Bearer TOKEN" metadata.
func bearer(ctx context.Context) (string, error) {
	vals := metadata.ValueFromIncomingContext(ctx, "authorization")
	if len(vals) == 0 {
		return "", errNoToken
	}
	scheme, tok, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", errBadScheme
	}
	return strings.TrimSpace(tok), nil
}

// tokenIdentity names a token by the start of its SHA-256 digest (the
// tokens file keeps digests only).
func tokenIdentity(tok string) string {
	d := sha256.Sum256([]byte(tok))
	return "token:" + hex.EncodeToString(d[:6])
}

// certTenant is the subject CN of the call's verified client certificate,
// and its serial number in hex.
func certTenant(ctx context.Context) (cn, serial string, err error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", "", errNoClientCert
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return "", "", errNoClientCert
	}
	leaf := ti.State.VerifiedChains[0][0]
	cn = leaf.Subject.CommonName
	if ValidateTenant(cn) != nil {
		return "", "", errBadCN
	}
	return cn, leaf.SerialNumber.Text(16), nil
}
