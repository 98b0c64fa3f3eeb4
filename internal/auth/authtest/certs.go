// Package authtest makes what tests of authentication need: a throwaway
// certificate authority issuing server and client certificates, generated
// in-process with crypto/x509, and tokens files.
package authtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority for one test.
type CA struct {
	t      testing.TB
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	serial int64
	// CertFile is the CA certificate as a PEM file.
	CertFile string
}

// NewCA returns a CA whose files live in t.TempDir.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{t: t, cert: cert, key: key, serial: 1}
	ca.CertFile = writePEM(t, name+"-ca.pem", "CERTIFICATE", der)
	return ca
}

// Pool is a pool holding the CA certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// Issued is a certificate the CA issued, in memory and as PEM files.
type Issued struct {
	TLS               tls.Certificate
	CertFile, KeyFile string
}

// Server issues a server certificate for 127.0.0.1 and localhost.
func (ca *CA) Server(name string) Issued {
	return ca.issue(name, x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, []string{"localhost"})
}

// Client issues a client certificate with subject CN cn.
func (ca *CA) Client(cn string) Issued {
	return ca.issue(cn, x509.ExtKeyUsageClientAuth, nil, nil)
}

func (ca *CA) issue(cn string, usage x509.ExtKeyUsage, ips []net.IP, dns []string) Issued {
	t := ca.t
	t.Helper()
	ca.serial++
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  ips,
		DNSNames:     dns,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	base := ca.cert.Subject.CommonName + "-" + cn + "-" + big.NewInt(ca.serial).String()
	out := Issued{
		CertFile: writePEM(t, base+".pem", "CERTIFICATE", der),
		KeyFile:  writePEM(t, base+"-key.pem", "EC PRIVATE KEY", keyDER),
	}
	out.TLS, err = tls.LoadX509KeyPair(out.CertFile, out.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func writePEM(t testing.TB, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TokensFile writes a tokens file of "TENANT TOKEN" lines and returns its path.
func TokensFile(t testing.TB, tenantTokens ...[2]string) string {
	t.Helper()
	var b []byte
	for _, tt := range tenantTokens {
		b = append(b, tt[0]+" "+tt[1]+"\n"...)
	}
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
