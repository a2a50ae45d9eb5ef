// Package client calls dlbd's admin API (package api) as typed Go: over
// its unix socket, or over TLS with a token at its TCP listener (dlbd
// --api-address).
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/smallfile"
)

// DefaultSocket is where dlbd listens by default.
const DefaultSocket = "/run/dlb/dlbd.sock"

// MaxSocketPath is the longest path a unix socket may have: the 108 bytes
// of the kernel's sun_path less the terminating NUL.
const MaxSocketPath = 107

// CheckSocketPath returns an error naming what is wrong when path cannot
// name a unix socket (the kernel would answer "invalid argument").
func CheckSocketPath(path string) error {
	switch {
	case path == "":
		return errors.New("the socket's path is empty")
	case len(path) > MaxSocketPath:
		return fmt.Errorf("%s is %d bytes long; a unix socket's path holds at most %d", path, len(path), MaxSocketPath)
	}
	return nil
}

// ErrUnreachable is returned (wrapped) when dlbd cannot be reached: no
// connection was made, so nothing was sent.
var ErrUnreachable = errors.New("cannot reach dlbd")

// ErrNoAnswer is returned (wrapped) when dlbd took the request but did
// not answer it: within the client's timeout (a stopped or stuck dlbd),
// or before the connection was closed (dlbd ended). A change may or may
// not have been applied.
var ErrNoAnswer = errors.New("dlbd did not answer")

// maxAnswer bounds an answer read into memory: a server report of the
// largest executor (16,777,215 servers at about 400 bytes of JSON each)
// would be larger, one of a million servers is not. A variable for tests.
var maxAnswer = 1 << 30

// DefaultTimeout bounds a request (the whole exchange) of a client from
// New.
const DefaultTimeout = 60 * time.Second

// RefusedError is returned when dlbd refused a request.
type RefusedError struct {
	// Status is the HTTP status dlbd answered.
	Status int
	// API is the error dlbd sent.
	API api.Error
}

// Error returns dlbd's message.
func (e *RefusedError) Error() string { return e.API.Message }

// Client talks to one dlbd.
type Client struct {
	// where names dlbd in errors (its socket, or https://ADDRESS); base
	// is the URL requests go to; token, when set, is sent as a bearer
	// token.
	where string
	base  string
	token string
	hc    *http.Client
}

// New returns a client for the dlbd listening on the unix socket path,
// whose requests wait DefaultTimeout at most.
func New(socket string) *Client {
	return NewTimeout(socket, DefaultTimeout)
}

// NewTimeout is New with requests that wait timeout at most (0: no
// limit).
func NewTimeout(socket string, timeout time.Duration) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}
	return &Client{where: socket, base: "http://dlbd", hc: &http.Client{Transport: tr, Timeout: timeout}}
}

// Remote says how to reach a dlbd's TCP admin listener (dlbd
// --api-address).
type Remote struct {
	// Address is HOST:PORT.
	Address string
	// CAFile holds the certificates (PEM) that may sign dlbd's; empty:
	// the system's roots.
	CAFile string
	// TokenFile holds the token dlbd was started with (dlbd
	// --api-token-file).
	TokenFile string
}

// The largest token file (dlbd refuses a larger one) and CA file (a
// system's whole bundle is a few hundred KiB) NewRemote reads.
const (
	maxTokenFile = 4095
	maxPEMFile   = 16 << 20
)

// NewRemote returns a client for a dlbd's TCP admin listener: TLS,
// dlbd's certificate verified against r.CAFile, and the token of
// r.TokenFile sent with every request, which waits timeout at most (0: no
// limit).
func NewRemote(r Remote, timeout time.Duration) (*Client, error) {
	if _, _, err := net.SplitHostPort(r.Address); err != nil {
		return nil, fmt.Errorf("dlbd's address %q: want HOST:PORT: %w", r.Address, err)
	}
	// Files of a bounded size, and regular ones: a named pipe or a device
	// named by mistake would hang dlbctl or fill its memory.
	b, err := smallfile.Read(r.TokenFile, maxTokenFile)
	if err != nil {
		return nil, fmt.Errorf("reading the token: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return nil, fmt.Errorf("reading the token: %s is empty", r.TokenFile)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if r.CAFile != "" {
		pem, err := smallfile.Read(r.CAFile, maxPEMFile)
		if err != nil {
			return nil, fmt.Errorf("reading the CA certificates: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("reading the CA certificates: %s holds no PEM certificate", r.CAFile)
		}
	}
	tr := &http.Transport{TLSClientConfig: cfg, TLSHandshakeTimeout: 10 * time.Second}
	return &Client{where: "https://" + r.Address, base: "https://" + r.Address, token: token,
		hc: &http.Client{Transport: tr, Timeout: timeout}}, nil
}

// sending records whether any of a request was written: req with a
// trace that sets sent once its headers are.
func sending(req *http.Request) (*http.Request, *atomic.Bool) {
	sent := new(atomic.Bool)
	trace := &httptrace.ClientTrace{WroteHeaders: func() { sent.Store(true) }}
	return req.WithContext(httptrace.WithClientTrace(req.Context(), trace)), sent
}

// sendError tells a request that could not be sent from one that was
// sent and not answered (within timeout, when it is not 0); sent says
// whether any of it was written (sending).
func (c *Client) sendError(err error, timeout time.Duration, sent bool) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		// The dial's error stays inspectable (permission denied, no such
		// file).
		return fmt.Errorf("%w at %s: %w", ErrUnreachable, c.where, err)
	}
	// A TLS handshake that failed sent nothing either: a certificate not
	// trusted, or a listener that does not speak TLS.
	var cv *tls.CertificateVerificationError
	var rh tls.RecordHeaderError
	if errors.As(err, &cv) || errors.As(err, &rh) || strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		return fmt.Errorf("%w at %s: TLS: %v", ErrUnreachable, c.where, err)
	}
	// Nothing of the request left this host: the connection failed
	// before (dlbd closed it at once, over its limit of connections; a
	// handshake that did not finish).
	if !sent {
		return fmt.Errorf("%w at %s: the connection failed before the request was sent: %v", ErrUnreachable, c.where, err)
	}
	var ue *url.Error
	if errors.As(err, &ue) && ue.Timeout() && timeout > 0 {
		return fmt.Errorf("%w within %s at %s: %v", ErrNoAnswer, timeout, c.where, err)
	}
	return fmt.Errorf("%w at %s: %v", ErrNoAnswer, c.where, err)
}

// Apply sends a batch of operations; dlbd applies all or none.
func (c *Client) Apply(ctx context.Context, ops ...api.Op) (api.Result, error) {
	var res api.Result
	err := c.do(ctx, http.MethodPost, api.PathOps, "", api.Request{Ops: ops}, &res)
	return res, err
}

// Executor reports the executor.
func (c *Client) Executor(ctx context.Context) (api.ExecutorReport, error) {
	var r api.ExecutorReport
	err := c.do(ctx, http.MethodGet, api.PathExecutor, "", nil, &r)
	return r, err
}

// Clusters reports the clusters target selects ("" for all).
func (c *Client) Clusters(ctx context.Context, target string) ([]api.ClusterReport, error) {
	var r []api.ClusterReport
	err := c.do(ctx, http.MethodGet, api.PathClusters, target, nil, &r)
	return r, err
}

// Ports reports the ports target selects (cluster@port, "" for all).
func (c *Client) Ports(ctx context.Context, target string) ([]api.PortReport, error) {
	var r []api.PortReport
	err := c.do(ctx, http.MethodGet, api.PathPorts, target, nil, &r)
	return r, err
}

// Servers reports the servers target selects (cluster@port@server, "" for
// all).
func (c *Client) Servers(ctx context.Context, target string) ([]api.ServerReport, error) {
	var r []api.ServerReport
	err := c.do(ctx, http.MethodGet, api.PathServers, target, nil, &r)
	return r, err
}

// Manager reports the manager: weights and their inputs, for the ports
// and servers target selects (cluster@port@server, "" for all).
func (c *Client) Manager(ctx context.Context, target string) (api.ManagerReport, error) {
	var r api.ManagerReport
	err := c.do(ctx, http.MethodGet, api.PathManager, target, nil, &r)
	return r, err
}

// Advisors reports the started advisors and their servers.
func (c *Client) Advisors(ctx context.Context) ([]api.AdvisorReport, error) {
	var r []api.AdvisorReport
	err := c.do(ctx, http.MethodGet, api.PathAdvisors, "", nil, &r)
	return r, err
}

// Metrics reports the metric servers' figures.
func (c *Client) Metrics(ctx context.Context) (api.MetricReport, error) {
	var r api.MetricReport
	err := c.do(ctx, http.MethodGet, api.PathMetrics, "", nil, &r)
	return r, err
}

// BGP reports the BGP speaker.
func (c *Client) BGP(ctx context.Context) (api.BGPReport, error) {
	var r api.BGPReport
	err := c.do(ctx, http.MethodGet, api.PathBGP, "", nil, &r)
	return r, err
}

// ConfigScript returns the configuration as a script of dlbctl commands
// ("dlbctl file save").
func (c *Client) ConfigScript(ctx context.Context) (string, error) {
	var s scriptText
	err := c.do(ctx, http.MethodGet, api.PathConfigScript, "", nil, &s)
	return string(s), err
}

// HA reports high availability ("highavailability status").
func (c *Client) HA(ctx context.Context) (api.HAReport, error) {
	var r api.HAReport
	err := c.do(ctx, http.MethodGet, api.PathHA, "", nil, &r)
	return r, err
}

// Takeover asks dlbd to take over the clusters of the dispatcher whose
// heartbeat address addr is, or all of them (addr empty); the result
// carries warnings (a takeover the peer undoes at once).
func (c *Client) Takeover(ctx context.Context, addr string) (api.Result, error) {
	var r api.Result
	err := c.do(ctx, http.MethodPost, api.PathTakeover, "", api.TakeoverRequest{Address: addr}, &r)
	return r, err
}

// scriptText takes a text/plain answer as it is.
type scriptText string

func (c *Client) do(ctx context.Context, method, path, target string, body, out any) error {
	u := c.base + path
	if target != "" {
		u += "?target=" + url.QueryEscape(target)
	}
	var rd io.Reader
	contentType := "application/json"
	switch b := body.(type) {
	case nil:
	case rawBody:
		rd, contentType = bytes.NewReader(b), "application/yaml"
	default:
		data, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encoding request: %w", err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("building request: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	c.authorize(req)
	req, sent := sending(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return c.sendError(err, c.hc.Timeout, sent.Load())
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, int64(maxAnswer)+1))
	if err != nil {
		return fmt.Errorf("%w in full at %s: reading its answer: %v", ErrNoAnswer, c.where, err)
	}
	if len(data) > maxAnswer {
		return fmt.Errorf("reading dlbd's answer: larger than %d bytes (a report of a narrower target is smaller)", maxAnswer)
	}
	if resp.StatusCode != http.StatusOK {
		re := &RefusedError{Status: resp.StatusCode, API: api.Error{Op: -1}}
		if err := json.Unmarshal(data, &re.API); err != nil || re.API.Message == "" {
			re.API.Message = fmt.Sprintf("dlbd answered %s: %s", resp.Status, bytes.TrimSpace(data))
		}
		return re
	}
	if t, ok := out.(*scriptText); ok {
		*t = scriptText(data)
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decoding response: %w", err)
	}
	return nil
}

// authorize adds the token, when the client has one.
func (c *Client) authorize(req *http.Request) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
}
