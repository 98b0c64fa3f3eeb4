package auth_test

import (
	"os"
	"strings"
	"testing"

	"github.com/policyd/policyd/internal/auth"
	"github.com/policyd/policyd/internal/auth/authtest"
)

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestTLSFilesReload(t *testing.T) {
	t.Parallel()
	ca := authtest.NewCA(t, "reload")
	first, second := ca.Server("one"), ca.Server("two")
	files, err := auth.LoadTLS(first.CertFile, first.KeyFile, ca.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	if !files.MutualTLS() {
		t.Error("MutualTLS = false with a client CA")
	}
	served := func() string {
		cfg, err := files.Config().GetConfigForClient(nil)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.ClientCAs == nil || len(cfg.NextProtos) != 1 || cfg.NextProtos[0] != "h2" {
			t.Fatalf("served config: ClientCAs %v, NextProtos %v; want the CA and h2", cfg.ClientCAs, cfg.NextProtos)
		}
		return string(cfg.Certificates[0].Certificate[0])
	}
	if served() != string(first.TLS.Certificate[0]) {
		t.Fatal("not serving the first certificate")
	}
	copyFile(t, second.CertFile, first.CertFile)
	copyFile(t, second.KeyFile, first.KeyFile)
	if err := files.Reload(); err != nil {
		t.Fatal(err)
	}
	if served() != string(second.TLS.Certificate[0]) {
		t.Fatal("Reload did not put the new certificate in force")
	}
	if err := os.WriteFile(first.KeyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := files.Reload(); err == nil || !strings.Contains(err.Error(), first.KeyFile) {
		t.Errorf("Reload of a bad key: %v, want an error naming %s", err, first.KeyFile)
	}
	if served() != string(second.TLS.Certificate[0]) {
		t.Error("a failed Reload changed the certificate in force")
	}
}

func TestLoadTLSErrors(t *testing.T) {
	t.Parallel()
	ca := authtest.NewCA(t, "errors")
	srv := ca.Server("s")
	tests := []struct {
		name              string
		cert, key, caFile string
		wantErr           string
	}{
		{name: "missing cert", cert: "/nonexistent.pem", key: srv.KeyFile, wantErr: "TLS certificate /nonexistent.pem"},
		{name: "key of another cert", cert: srv.CertFile, key: ca.Server("t").KeyFile, wantErr: "private key does not match"},
		{name: "missing CA", cert: srv.CertFile, key: srv.KeyFile, caFile: "/nonexistent-ca.pem", wantErr: "TLS client CA"},
		{name: "CA not PEM", cert: srv.CertFile, key: srv.KeyFile, caFile: srv.KeyFile, wantErr: "no PEM certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := auth.LoadTLS(tt.cert, tt.key, tt.caFile); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}
