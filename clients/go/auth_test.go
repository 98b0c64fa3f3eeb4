package policyd_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	policyd "github.com/policyd/policyd/clients/go"
)

const (
	testToken  = "acme-go-client-token-0000000001"
	otherToken = "not-a-known-token-000000000002"
)

// authDaemon starts a policyd of its own with extra serve flags and stops
// it at the end of the test.
func authDaemon(t *testing.T, extra ...string) *daemon {
	t.Helper()
	policydBin(t)
	d, err := startDaemon("127.0.0.1:0", "", extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.stop)
	return d
}

func (d *daemon) logText() string { return d.Logs() }

// tokensFile writes a tokens file naming tenant acme with testToken.
func tokensFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("acme "+testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// debugLogger logs everything, to check that no token reaches the logs.
func (b *logBuffer) debugLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// With --auth-tokens, the right token is sent on every call; a missing or
// wrong one stops the call at once with an error naming POLICYD_TOKEN,
// without failing open, and no token reaches any log.
func TestAuthToken(t *testing.T) {
	t.Parallel()
	d := authDaemon(t, "--auth-tokens", tokensFile(t))
	var logs logBuffer

	t.Run("right token", func(t *testing.T) {
		var decided decisions
		c := newClient(t, d.addr, policyd.WithToken(testToken), policyd.WithLogger(logs.debugLogger()),
			policyd.WithClock(newFakeClock()), decided.option())
		srv := newFlaky(t, step{status: 503, body: overloadedBody}, step{status: 200})
		if err := c.Do(context.Background(), openai, chat(srv.URL)); err != nil {
			t.Fatalf("Do: %v", err)
		}
		if ds := decided.get(); len(ds) != 1 || ds[0].FailOpen || ds[0].Rule == "" {
			t.Errorf("decisions = %+v, want one decision of policyd's", ds)
		}
		if _, err := c.Classify(context.Background(), &policyd.Failure{HTTPStatus: 429}, ""); err != nil {
			t.Errorf("Classify: %v", err)
		}
	})

	for _, tt := range []struct {
		name, token, want string
	}{
		{name: "no token", want: "missing bearer token: send metadata \"authorization: Bearer TOKEN\"; set POLICYD_TOKEN"},
		{name: "wrong token", token: otherToken, want: "invalid bearer token; the token sent (POLICYD_TOKEN or WithToken) is not in"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var decided decisions
			c := newClient(t, d.addr, policyd.WithToken(tt.token), policyd.WithLogger(logs.debugLogger()), decided.option())
			srv := newFlaky(t, step{status: 503, body: overloadedBody}, step{status: 200})
			err := c.Do(context.Background(), openai, chat(srv.URL))
			var perr *policyd.Error
			var aerr *policyd.AuthError
			if !errors.As(err, &perr) || !errors.As(err, &aerr) || !errors.Is(err, policyd.ErrUnauthenticated) {
				t.Fatalf("Do = %v, want a *policyd.Error with an *AuthError", err)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "HTTP 503") {
				t.Errorf("error %q does not say %q and the attempt's error", err, tt.want)
			}
			var httpErr *policyd.HTTPError
			if !errors.As(err, &httpErr) || perr.Attempts != 1 || srv.hits.Load() != 1 || aerr.Method != "NextDelay" {
				t.Errorf("attempts %d, hits %d, method %q: want one attempt, not retried, NextDelay refused",
					perr.Attempts, srv.hits.Load(), aerr.Method)
			}
			if ds := decided.get(); len(ds) != 0 {
				t.Errorf("decisions = %+v: the client failed open on UNAUTHENTICATED", ds)
			}
			if _, err := c.Classify(context.Background(), &policyd.Failure{HTTPStatus: 429}, ""); !errors.Is(err, policyd.ErrUnauthenticated) {
				t.Errorf("Classify = %v, want ErrUnauthenticated", err)
			}
		})
	}

	t.Run("token never logged", func(t *testing.T) {
		for _, tok := range []string{testToken, otherToken} {
			if strings.Contains(logs.String(), tok) {
				t.Errorf("the client's logs contain a token:\n%s", logs.String())
			}
			if strings.Contains(d.logText(), tok) {
				t.Errorf("the daemon's logs contain a token:\n%s", d.logText())
			}
		}
	})
}

// The token comes from POLICYD_TOKEN when WithToken is not given; an
// explicit WithToken("") sends none.
func TestAuthTokenFromEnv(t *testing.T) {
	d := authDaemon(t, "--auth-tokens", tokensFile(t))
	t.Setenv(policyd.EnvToken, testToken)
	c := newClient(t, d.addr)
	if _, err := c.Classify(context.Background(), &policyd.Failure{HTTPStatus: 503}, ""); err != nil {
		t.Fatalf("Classify with POLICYD_TOKEN: %v", err)
	}
	none := newClient(t, d.addr, policyd.WithToken(""))
	if _, err := none.Classify(context.Background(), &policyd.Failure{HTTPStatus: 503}, ""); !errors.Is(err, policyd.ErrUnauthenticated) {
		t.Fatalf("Classify with WithToken(\"\") = %v, want ErrUnauthenticated", err)
	}
}

// testCA is a throwaway certificate authority whose files live in a
// temporary directory.
type testCA struct {
	t        *testing.T
	dir      string
	cert     *x509.Certificate
	key      *ecdsa.PrivateKey
	serial   int64
	CertFile string
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	ca := &testCA{t: t, dir: t.TempDir(), key: newECKey(t), serial: 1}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "policyd test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &ca.key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	if ca.cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	ca.CertFile = ca.write("ca.pem", "CERTIFICATE", der)
	return ca
}

// issue returns the certificate and key files of a server certificate for
// 127.0.0.1 and localhost (server true) or a client certificate of CN cn.
func (ca *testCA) issue(cn string, server bool) (certFile, keyFile string) {
	t := ca.t
	t.Helper()
	ca.serial++
	key := newECKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses, tmpl.DNSNames = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	name := cn + "-" + big.NewInt(ca.serial).String()
	return ca.write(name+".pem", "CERTIFICATE", der), ca.write(name+"-key.pem", "EC PRIVATE KEY", keyDER)
}

func (ca *testCA) write(name, typ string, der []byte) string {
	path := filepath.Join(ca.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		ca.t.Fatal(err)
	}
	return path
}

func newECKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// Against a daemon serving mutual TLS with tokens: the CA file, the client
// certificate and the token together are admitted; without the client
// certificate the handshake fails; a bad CA file is Dial's error.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	srvCert, srvKey := ca.issue("localhost", true)
	cliCert, cliKey := ca.issue("agent", false)
	d := authDaemon(t, "--auth-tokens", tokensFile(t), "--tls-cert", srvCert, "--tls-key", srvKey, "--tls-client-ca", ca.CertFile)
	failure := &policyd.Failure{HTTPStatus: 429}

	t.Run("CA, client certificate and token", func(t *testing.T) {
		var decided decisions
		c := newClient(t, d.addr, policyd.WithTLS(ca.CertFile), policyd.WithClientCert(cliCert, cliKey),
			policyd.WithToken(testToken), policyd.WithClock(newFakeClock()), decided.option())
		if _, err := c.Classify(context.Background(), failure, ""); err != nil {
			t.Fatalf("Classify over mutual TLS: %v", err)
		}
		srv := newFlaky(t, step{status: 503, body: overloadedBody}, step{status: 200})
		if err := c.Do(context.Background(), openai, chat(srv.URL)); err != nil {
			t.Fatalf("Do: %v", err)
		}
		if ds := decided.get(); len(ds) != 1 || ds[0].FailOpen {
			t.Errorf("decisions = %+v, want one of policyd's", ds)
		}
	})
	t.Run("no client certificate", func(t *testing.T) {
		c := newClient(t, d.addr, policyd.WithTLS(ca.CertFile), policyd.WithToken(testToken))
		if _, err := c.Classify(context.Background(), failure, ""); err == nil {
			t.Fatal("Classify without a client certificate succeeded")
		}
	})
	t.Run("plaintext to a TLS daemon", func(t *testing.T) {
		c := newClient(t, d.addr, policyd.WithToken(testToken))
		if _, err := c.Classify(context.Background(), failure, ""); err == nil {
			t.Fatal("Classify in plaintext succeeded")
		}
	})
	t.Run("bad CA file", func(t *testing.T) {
		if _, err := policyd.Dial(d.addr, policyd.WithTLS(srvKey)); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
			t.Errorf("Dial with a key as CA = %v, want an error saying no PEM certificate", err)
		}
		if _, err := policyd.Dial(d.addr, policyd.WithClientCert(cliCert, "")); err == nil || !strings.Contains(err.Error(), "both") {
			t.Errorf("Dial with a certificate without key = %v, want an error", err)
		}
	})
}

// POLICYD_TLS_CA, POLICYD_TLS_CERT and POLICYD_TLS_KEY turn TLS on without
// options.
func TestTLSFromEnv(t *testing.T) {
	ca := newTestCA(t)
	srvCert, srvKey := ca.issue("localhost", true)
	cliCert, cliKey := ca.issue("agent", false)
	// Mutual TLS without tokens: the tenant is the certificate's CN.
	d := authDaemon(t, "--tls-cert", srvCert, "--tls-key", srvKey, "--tls-client-ca", ca.CertFile)
	t.Setenv(policyd.EnvTLSCA, ca.CertFile)
	t.Setenv(policyd.EnvTLSCert, cliCert)
	t.Setenv(policyd.EnvTLSKey, cliKey)
	c := newClient(t, d.addr)
	if _, err := c.Classify(context.Background(), &policyd.Failure{HTTPStatus: 503}, ""); err != nil {
		t.Fatalf("Classify with the POLICYD_TLS_* variables: %v", err)
	}
}
