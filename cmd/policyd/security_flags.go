package main

import (
	"flag"
	"log/slog"
	"math"
	"net"
	"os"
	"strings"
	"time"

	"github.com/policyd/policyd/internal/auth"
	"github.com/policyd/policyd/internal/server"
)

// securityFlags are serve's authentication, TLS and limit flags.
type securityFlags struct {
	tokensFile, tlsCert, tlsKey, tlsClientCA *string
	maxMessageBytes, maxHeaderBytes          *int
	maxConcurrentStreams                     *uint
	requestTimeout                           *time.Duration
	rateLimit                                *float64
	rateBurst                                *int
	adminTenants                             *string

	tls *auth.TLSFiles // loaded by security; nil without TLS
}

func defineSecurityFlags(fs *flag.FlagSet) *securityFlags {
	f := &securityFlags{
		tokensFile: fs.String("auth-tokens", os.Getenv("POLICYD_AUTH_TOKENS"),
			"bearer tokens `file`, lines of \"TENANT TOKEN\"; every call but health and reflection needs a token, reloaded on SIGHUP (env POLICYD_AUTH_TOKENS)"),
		tlsCert: fs.String("tls-cert", os.Getenv("POLICYD_TLS_CERT"),
			"TLS certificate chain PEM `file`; with --tls-key serves TLS (env POLICYD_TLS_CERT)"),
		tlsKey: fs.String("tls-key", os.Getenv("POLICYD_TLS_KEY"),
			"TLS private key PEM `file` (env POLICYD_TLS_KEY)"),
		tlsClientCA: fs.String("tls-client-ca", os.Getenv("POLICYD_TLS_CLIENT_CA"),
			"CA certificates PEM `file`: require client certificates it signed (mutual TLS); needs --tls-cert and --tls-key (env POLICYD_TLS_CLIENT_CA)"),
		maxMessageBytes: fs.Int("max-message-bytes", server.DefaultMaxMessageBytes,
			"largest request in `bytes`; larger ones are RESOURCE_EXHAUSTED"),
		maxHeaderBytes: fs.Int("max-header-bytes", server.DefaultMaxHeaderBytes,
			"largest metadata of a call in `bytes` (HTTP/2 header list); larger ones are refused before they are decoded"),
		maxConcurrentStreams: fs.Uint("max-concurrent-streams", server.DefaultMaxConcurrentStreams,
			"calls in flight per connection; 0 is unlimited"),
		requestTimeout: fs.Duration("request-timeout", server.DefaultRequestTimeout,
			"deadline of a journal call whose client sent none; 0 is none (PolicyService calls answer from memory)"),
		rateLimit: fs.Float64("rate-limit", 0,
			"calls per second per tenant (health and reflection not counted); over it RESOURCE_EXHAUSTED with grpc-retry-pushback-ms; 0 is off"),
		rateBurst: fs.Int("rate-burst", 0,
			"calls a tenant may make at once under --rate-limit; 0 is the rate rounded up"),
		adminTenants: fs.String("admin-tenants", os.Getenv("POLICYD_ADMIN_TENANTS"),
			"comma-separated `tenants` whose callers may clear fleet state (FleetService.ClearBucket, policyd fleet clear); without authentication every caller may (env POLICYD_ADMIN_TENANTS)"),
	}
	return f
}

// security checks the flags and loads the files they name; bad flags and
// bad files are usage errors (exit 2).
func (f *securityFlags) security() (server.Security, error) {
	s := server.Security{RequestTimeout: *f.requestTimeout}
	if (*f.tlsCert == "") != (*f.tlsKey == "") {
		return s, usageErrorf("serve: --tls-cert and --tls-key go together: give both or neither")
	}
	if *f.tlsClientCA != "" && *f.tlsCert == "" {
		return s, usageErrorf("serve: --tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS first)")
	}
	if *f.tlsCert != "" {
		files, err := auth.LoadTLS(*f.tlsCert, *f.tlsKey, *f.tlsClientCA)
		if err != nil {
			return s, usageErrorf("serve: %v", err)
		}
		f.tls = files
		s.TLS = files.Config()
	}
	switch {
	case *f.tokensFile != "":
		t, err := auth.LoadTokens(*f.tokensFile)
		if err != nil {
			return s, usageErrorf("serve: --auth-tokens: %v", err)
		}
		s.Auth = auth.NewTokenAuthenticator(t)
	case *f.tlsClientCA != "":
		s.Auth = auth.NewCertAuthenticator()
	}
	if *f.maxMessageBytes < 1 {
		return s, usageErrorf("serve: --max-message-bytes must be at least 1, got %d", *f.maxMessageBytes)
	}
	s.MaxMessageBytes = *f.maxMessageBytes
	if *f.maxHeaderBytes < 1024 || *f.maxHeaderBytes > 16<<20 {
		return s, usageErrorf("serve: --max-header-bytes must be within 1024 and %d, got %d", 16<<20, *f.maxHeaderBytes)
	}
	s.MaxHeaderBytes = *f.maxHeaderBytes
	if *f.maxConcurrentStreams > math.MaxUint32 {
		return s, usageErrorf("serve: --max-concurrent-streams must be at most %d", uint32(math.MaxUint32))
	}
	s.MaxConcurrentStreams = uint32(*f.maxConcurrentStreams)
	if s.RequestTimeout < 0 {
		return s, usageErrorf("serve: --request-timeout must not be negative, got %v", s.RequestTimeout)
	}
	if r := *f.rateLimit; r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
		return s, usageErrorf("serve: --rate-limit must be a number ≥ 0, got %v", r)
	}
	if *f.rateBurst < 0 {
		return s, usageErrorf("serve: --rate-burst must be ≥ 0, got %d", *f.rateBurst)
	}
	if *f.rateLimit > 0 {
		s.RateLimit = *f.rateLimit
		s.RateBurst = *f.rateBurst
		if s.RateBurst == 0 {
			s.RateBurst = int(math.Max(1, math.Ceil(s.RateLimit)))
		}
	}
	return s, nil
}

// admins is who may call the admin RPCs.
func (f *securityFlags) admins(s server.Security) (server.Admins, error) {
	a := server.Admins{Authenticated: s.Auth != nil, Tenants: map[string]bool{}}
	for _, t := range strings.Split(*f.adminTenants, ",") {
		if t = strings.TrimSpace(t); t == "" {
			continue
		}
		if err := auth.ValidateTenant(t); err != nil {
			return a, usageErrorf("serve: --admin-tenants: %v", err)
		}
		a.Tenants[t] = true
	}
	return a, nil
}

// authMode names how callers are authenticated, for the "serving" record.
func (f *securityFlags) authMode() string {
	switch {
	case *f.tokensFile != "":
		return "tokens"
	case *f.tlsClientCA != "":
		return "client-cert"
	}
	return "none"
}

// reloadTokens loads the tokens file afresh and puts it in force, or logs
// why not; the log never names a token.
func reloadTokens(path string, a *auth.Authenticator, logger *slog.Logger) {
	t, err := auth.LoadTokens(path)
	if err != nil {
		logger.Error("tokens reload failed; keeping the tokens in force", "error", err)
		return
	}
	a.SetTokens(t)
	logger.Info("tokens reloaded", "path", path, "tokens", t.Len(), "tenants", t.Tenants())
}

// reloadTLS reads the TLS files afresh and puts them in force for new
// connections, or logs why not.
func reloadTLS(files *auth.TLSFiles, logger *slog.Logger) {
	if err := files.Reload(); err != nil {
		logger.Error("TLS reload failed; keeping the certificates in force", "error", err)
		return
	}
	logger.Info("TLS certificates reloaded")
}

// isLoopback reports whether addr is a loopback address.
func isLoopback(addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
