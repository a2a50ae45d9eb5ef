package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"github.com/dlbproject/dlb/pkg/server"
	"github.com/dlbproject/dlb/pkg/smallfile"
)

// maxPEMFile bounds --api-cert and --api-key (a certificate with its
// chain is a few KiB).
const maxPEMFile = 1 << 20

// remoteAPI is the admin API's TCP listener as the flags ask for it: off
// unless --api-address is given, and then only with TLS and a token.
type remoteAPI struct {
	address string
	tls     *tls.Config
	token   string
}

// checkRemoteAPI checks the --api-* flags and reads what they name
// (before dlbd touches anything): nil when --api-address is not given.
func checkRemoteAPI(address, cert, key, tokenFile string) (*remoteAPI, error) {
	if address == "" {
		if cert != "" || key != "" || tokenFile != "" {
			return nil, errors.New("--api-cert, --api-key and --api-token-file go with --api-address")
		}
		return nil, nil
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("--api-address: %q is not ADDRESS:PORT: %w", address, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return nil, fmt.Errorf("--api-address: %q: the port must be a number 1..65535", address)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return nil, fmt.Errorf("--api-address: %q: the host must be an IP address of this host (the NFA)", address)
	}
	if ip.IsUnspecified() {
		return nil, fmt.Errorf("--api-address: %q listens on every address: name one, the NFA (the admin API changes the load balancer)", address)
	}
	if cert == "" || key == "" || tokenFile == "" {
		return nil, errors.New("--api-address needs --api-cert, --api-key and --api-token-file: the admin API is served over TLS, to holders of the token only")
	}
	// tls.LoadX509KeyPair would read a named pipe or a device without
	// end: dlbd would hang at its start.
	certPEM, err := smallfile.Read(cert, maxPEMFile)
	if err != nil {
		return nil, fmt.Errorf("--api-cert: %w", err)
	}
	keyPEM, err := smallfile.Read(key, maxPEMFile)
	if err != nil {
		return nil, fmt.Errorf("--api-key: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("--api-cert/--api-key: %w", err)
	}
	token, err := server.ReadToken(tokenFile)
	if err != nil {
		return nil, fmt.Errorf("--api-token-file: %w", err)
	}
	return &remoteAPI{address: address, token: token,
		tls: &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}}, nil
}
