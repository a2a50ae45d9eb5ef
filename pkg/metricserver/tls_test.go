package metricserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// testPKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, all PEM, into dir, and returns their paths.
type testPKI struct{ ca, serverCert, serverKey, clientCert, clientKey string }

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	keyDER := func(k *ecdsa.PrivateKey) []byte {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	now := time.Now()
	caKey := newKey()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "dlb test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, usage x509.ExtKeyUsage, ips ...net.IP) ([]byte, *ecdsa.PrivateKey) {
		k := newKey()
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "leaf"},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, k
	}
	srvDER, srvKey := leaf(2, x509.ExtKeyUsageServerAuth, net.IPv4(127, 0, 0, 1))
	cliDER, cliKey := leaf(3, x509.ExtKeyUsageClientAuth)
	return testPKI{
		ca:         write("ca.pem", "CERTIFICATE", caDER),
		serverCert: write("server.pem", "CERTIFICATE", srvDER),
		serverKey:  write("server-key.pem", "PRIVATE KEY", keyDER(srvKey)),
		clientCert: write("client.pem", "CERTIFICATE", cliDER),
		clientKey:  write("client-key.pem", "PRIVATE KEY", keyDER(cliKey)),
	}
}

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	srvCfg, err := ServerTLSConfig(pki.serverCert, pki.serverKey, pki.ca)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: newTestAgent(t, AgentOptions{}), TLSConfig: srvCfg, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := netip.MustParseAddrPort(ln.Addr().String())
	opts := FetchOptions{Secret: testSecret, Timeout: 2 * time.Second}

	withCert, err := ClientTLSConfig(pki.clientCert, pki.clientKey, pki.ca)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := NewClient(ClientOptions{TLS: withCert}).Fetch(context.Background(), addr, opts)
	if err != nil || rep.Metrics[MetricMemLoad] != 75 {
		t.Fatalf("mutual TLS fetch: %+v, %v", rep, err)
	}

	// The HMAC is still required over TLS.
	wrong := opts
	wrong.Secret = otherSecret
	if _, err := NewClient(ClientOptions{TLS: withCert}).Fetch(context.Background(), addr, wrong); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("wrong secret over TLS: %v", err)
	}

	// No client certificate, or plain HTTP: no report.
	noCert, err := ClientTLSConfig("", "", pki.ca)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*Client{
		"no client certificate": NewClient(ClientOptions{TLS: noCert}),
		"plain HTTP":            NewClient(ClientOptions{}),
	} {
		if _, err := c.Fetch(context.Background(), addr, opts); !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: %v, want ErrUnavailable", name, err)
		}
	}

	// Configuration errors.
	if _, err := ServerTLSConfig(pki.serverCert, "", ""); err == nil {
		t.Error("server certificate without key accepted")
	}
	if _, err := ServerTLSConfig(pki.serverCert, pki.serverKey, pki.serverKey); err == nil {
		t.Error("a key as CA bundle accepted")
	}
	if _, err := ClientTLSConfig(pki.clientCert, "", ""); err == nil {
		t.Error("client certificate without key accepted")
	}
}
