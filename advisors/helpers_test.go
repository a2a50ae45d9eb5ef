package advisors

// Test helpers shared by the advisors' tests (any test file of the package
// may use them): the "skip unless required" rule for external programs,
// free ports, external server processes killed by PID, a local TLS
// certificate, and the bound checks every probe must meet.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// requireTool returns the path of the external program name (looked up in
// PATH and the sbin directories). When it is missing the test is skipped
// with a message naming the Debian package — unless DLB_REQUIRE_PRIVILEGED=1
// (as CI sets it), in which case it fails, so that a test can never pass
// in CI by being skipped.
func requireTool(tb testing.TB, name, debianPackage string) string {
	tb.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/local/sbin"} {
		p := dir + "/" + name
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p
		}
	}
	if os.Getenv("DLB_REQUIRE_PRIVILEGED") == "1" {
		tb.Fatalf("%s needs %s (Debian package %s), and DLB_REQUIRE_PRIVILEGED=1 forbids skipping it", tb.Name(), name, debianPackage)
	}
	tb.Skipf("%s needs %s: apt-get install %s (or set DLB_REQUIRE_PRIVILEGED=1 to make this a failure)", tb.Name(), name, debianPackage)
	return ""
}

// freePort returns a port on 127.0.0.1 that was free for network ("tcp"
// or "udp") a moment ago, for external servers that cannot report theirs.
func freePort(tb testing.TB, network string) uint16 {
	tb.Helper()
	var a net.Addr
	switch network {
	case "tcp":
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		a = l.Addr()
		l.Close()
	default:
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		a = c.LocalAddr()
		c.Close()
	}
	return uint16(netip.MustParseAddrPort(a.String()).Port())
}

// startProcess starts an external server and kills it, by PID, when tb
// ends. Its output goes to the test log on failure.
func startProcess(tb testing.TB, path string, args ...string) *exec.Cmd {
	tb.Helper()
	cmd := exec.Command(path, args...)
	var out strings.Builder
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		if out.Len() < 64<<10 {
			out.Write(p)
		}
		return len(p), nil
	})
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting %s: %v", path, err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if tb.Failed() {
			mu.Lock()
			tb.Logf("%s output:\n%s", path, out.String())
			mu.Unlock()
		}
	})
	return cmd
}

// writerFunc adapts a function to io.Writer.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// waitTCP waits until 127.0.0.1:port accepts connections.
func waitTCP(tb testing.TB, port uint16) {
	tb.Helper()
	addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port).String()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Fatalf("nothing listens on %s after 10s", addr)
}

// loopback is 127.0.0.1.
var loopback = netip.MustParseAddr("127.0.0.1")

// loTarget is a Target on 127.0.0.1:port with short timeouts.
func loTarget(port uint16) Target {
	return Target{Address: loopback, Port: port, ConnectTimeout: time.Second, ReceiveTimeout: time.Second}
}

// portOf returns the port of a listener's or server's address.
func portOf(tb testing.TB, a net.Addr) uint16 {
	tb.Helper()
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		tb.Fatal(err)
	}
	return ap.Port()
}

// portOfURL returns the port of an httptest server's URL.
func portOfURL(tb testing.TB, url string) uint16 {
	tb.Helper()
	i := strings.LastIndexByte(url, ':')
	ap, err := netip.ParseAddrPort("127.0.0.1" + url[i:])
	if err != nil {
		tb.Fatal(err)
	}
	return ap.Port()
}

// refusedPort returns a TCP port on 127.0.0.1 that refuses connections.
func refusedPort(tb testing.TB) uint16 { return freePort(tb, "tcp") }

// probeTimed runs a probe and returns its result and how long it took,
// failing the test if it took longer than the Target's connect + receive
// timeout plus 500 ms, or returned up with a reason or down without one.
func probeTimed(tb testing.TB, a Advisor, t Target) (Result, time.Duration) {
	tb.Helper()
	start := time.Now()
	r := a.Probe(context.Background(), t)
	el := time.Since(start)
	if limit := t.ConnectTimeoutOrDefault() + t.ReceiveTimeoutOrDefault() + 500*time.Millisecond; el > limit {
		tb.Errorf("%s probe took %v, more than %v", a.Name(), el, limit)
	}
	checkResultShape(tb, r)
	return r, el
}

// checkResultShape checks the Result invariants: up has no reason, down
// has a short lower-case reason without a trailing period.
func checkResultShape(tb testing.TB, r Result) {
	tb.Helper()
	if r.Up {
		if r.Reason != "" {
			tb.Errorf("up result with reason %q", r.Reason)
		}
		return
	}
	switch {
	case r.Reason == "":
		tb.Errorf("down result without reason")
	case strings.HasSuffix(r.Reason, "."):
		tb.Errorf("reason %q ends with a period", r.Reason)
	case len(r.Reason) > 300:
		tb.Errorf("reason is %d bytes long", len(r.Reason))
	case r.Reason[0] >= 'A' && r.Reason[0] <= 'Z' && !strings.HasPrefix(r.Reason, "TLS ") && !strings.HasPrefix(r.Reason, "DNS ") && !strings.HasPrefix(r.Reason, "HTTP "):
		tb.Errorf("reason %q starts with a capital", r.Reason)
	}
}

var (
	testCertOnce sync.Once
	testCert     tls.Certificate
	testCertErr  error
)

// testTLSConfig returns a server TLS config with a self-signed certificate
// for "dlb.test" and 127.0.0.1, made once per test binary. If sni is not
// nil, it receives each client hello's server name.
func testTLSConfig(tb testing.TB, sni chan<- string) *tls.Config {
	tb.Helper()
	testCertOnce.Do(func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			testCertErr = err
			return
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(1),
			Subject:      pkix.Name{CommonName: "dlb.test"},
			DNSNames:     []string{"dlb.test"},
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			testCertErr = err
			return
		}
		testCert = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	})
	if testCertErr != nil {
		tb.Fatal(testCertErr)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{testCert}}
	if sni != nil {
		cfg.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			select {
			case sni <- h.ServerName:
			default:
			}
			return nil, nil
		}
	}
	return cfg
}

// tcpServer accepts connections on 127.0.0.1 and runs handle on each in
// its own goroutine (after a TLS handshake when tlsCfg is set). When tb
// ends it closes the listener and every connection, and waits for the
// handlers. handle gets a done channel closed at that point.
func tcpServer(tb testing.TB, tlsCfg *tls.Config, handle func(c net.Conn, done <-chan struct{})) uint16 {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				if tlsCfg != nil {
					tc := tls.Server(c, tlsCfg)
					_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
					if err := tc.Handshake(); err != nil {
						return
					}
					_ = tc.SetDeadline(time.Time{})
					c = tc
				}
				handle(c, done)
			}()
		}
	}()
	tb.Cleanup(func() {
		close(done)
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return portOf(tb, l.Addr())
}

// drain reads c until it fails or done is closed, then returns.
func drain(c net.Conn, done <-chan struct{}) {
	go func() {
		<-done
		c.Close()
	}()
	buf := make([]byte, 512)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

// execOutput runs a helper command (certificate generation and the like)
// and returns its combined output.
func execOutput(name string, args ...string) ([]byte, error) {
	return exec.Command(name, args...).CombinedOutput()
}
