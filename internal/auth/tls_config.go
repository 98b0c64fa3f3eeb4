package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
)

// TLSFiles is the server's TLS configuration read from PEM files, reloadable
// while serving so that certificates can be rotated without a restart.
type TLSFiles struct {
	certFile, keyFile, clientCAFile string
	current                         atomic.Pointer[tls.Config]
}

// LoadTLS reads the certificate chain and key in the PEM files certFile and
// keyFile and, when clientCAFile is not empty, the CA certificates in it:
// then every client must present a certificate that verifies against them
// (mutual TLS). TLS 1.2 or later.
func LoadTLS(certFile, keyFile, clientCAFile string) (*TLSFiles, error) {
	t := &TLSFiles{certFile: certFile, keyFile: keyFile, clientCAFile: clientCAFile}
	if err := t.Reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// Reload reads the files again; on error the configuration in force stays.
// New handshakes use the new one, established connections keep theirs.
func (t *TLSFiles) Reload() error {
	cfg, err := loadTLSConfig(t.certFile, t.keyFile, t.clientCAFile)
	if err != nil {
		return err
	}
	t.current.Store(cfg)
	return nil
}

// MutualTLS reports whether clients must present a certificate.
func (t *TLSFiles) MutualTLS() bool { return t.clientCAFile != "" }

// Config is the *tls.Config to serve with: each handshake gets the
// configuration last loaded.
func (t *TLSFiles) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return t.current.Load(), nil
		},
	}
}

func loadTLSConfig(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s and key %s: %w", certFile, keyFile, err)
	}
	// NextProtos: the config GetConfigForClient returns replaces the one
	// grpc-go set "h2" on, and gRPC clients require ALPN h2.
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	if clientCAFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("TLS client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("TLS client CA %s: %w", clientCAFile, errors.New("no PEM certificate found"))
	}
	cfg.ClientCAs = pool
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	return cfg, nil
}
