package metricserver

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/dlbproject/dlb/pkg/smallfile"
)

// ServerTLSConfig returns the TLS configuration of an agent serving HTTPS
// with the certificate and key in certFile and keyFile (PEM). With a
// clientCAFile (PEM bundle), clients must present a certificate signed by
// one of its CAs: mutual TLS. The shared secret is still required on top.
func ServerTLSConfig(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("serving TLS needs both a certificate and a key")
	}
	cert, err := loadKeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading TLS certificate: %w", err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if clientCAFile != "" {
		pool, err := loadPool(clientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// ClientTLSConfig returns the TLS configuration for a Client (see
// ClientOptions.TLS): agents' certificates are verified against the CAs in
// caFile (PEM bundle; empty means the system roots) and must name the
// address the client dials (an IP SAN), and the client presents the
// certificate in certFile and keyFile if given (needed by an agent started
// with a client CA).
func ClientTLSConfig(certFile, keyFile, caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := loadPool(caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := loadKeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("loading TLS client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case certFile != "" || keyFile != "":
		return nil, errors.New("a TLS client certificate needs both a certificate and a key")
	}
	return cfg, nil
}

// maxPEMFile bounds a certificate, key or CA bundle file (a system's
// whole CA bundle is a few hundred KiB).
const maxPEMFile = 16 << 20

// loadKeyPair is tls.LoadX509KeyPair reading its files as package
// smallfile does: regular files of a bounded size.
func loadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	cert, err := smallfile.Read(certFile, maxPEMFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	key, err := smallfile.Read(keyFile, maxPEMFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(cert, key)
}

// loadPool reads a PEM bundle of CA certificates.
func loadPool(path string) (*x509.CertPool, error) {
	pem, err := smallfile.Read(path, maxPEMFile)
	if err != nil {
		return nil, fmt.Errorf("reading CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}
