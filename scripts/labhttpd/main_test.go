package main

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

var discardLog = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestPeerIP(t *testing.T) {
	tests := []struct{ in, want string }{
		{"198.18.0.11:40000", "198.18.0.11"},
		{"[2001:2::11]:40000", "2001:2::11"},
		{"[::ffff:198.18.0.12]:1", "198.18.0.12"},
		{"[fe80::1%dlbeth0]:5", "fe80::1"},
		{"host:80", "host"},
		{"garbage", "garbage"},
	}
	for _, tt := range tests {
		if got := peerIP(tt.in); got != tt.want {
			t.Errorf("peerIP(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestPatternSHA256(t *testing.T) {
	for _, n := range []int64{0, 1, 63, 64, 65, 1000, 1 << 16} {
		b := make([]byte, n)
		for i := range b {
			b[i] = pattern[i%len(pattern)]
		}
		sum := sha256.Sum256(b)
		want := hex.EncodeToString(sum[:])
		for range 2 { // computed, then cached
			if got := patternSHA256(n); got != want {
				t.Errorf("patternSHA256(%d) = %s, want %s", n, got, want)
			}
		}
	}
}

func TestHandlerHeaders(t *testing.T) {
	srv := httptest.NewServer(newHandler("b7", discardLog))
	defer srv.Close()
	tests := []struct {
		name, method, path string
		status             int
		wantSHA            bool
	}{
		{"root", http.MethodGet, "/", http.StatusOK, false},
		{"head root", http.MethodHead, "/", http.StatusOK, false},
		{"bytes", http.MethodGet, "/bytes?n=1000", http.StatusOK, true},
		{"bytes empty", http.MethodGet, "/bytes?n=0", http.StatusOK, true},
		{"head bytes", http.MethodHead, "/bytes?n=77", http.StatusOK, true},
		{"bad bytes", http.MethodGet, "/bytes?n=-1", http.StatusBadRequest, false},
		{"paced bytes", http.MethodGet, "/bytes?n=30000&rate=100000", http.StatusOK, true},
		{"bad rate", http.MethodGet, "/bytes?n=10&rate=0", http.StatusBadRequest, false},
		{"not found", http.MethodGet, "/nope", http.StatusNotFound, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, srv.URL+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if got := resp.Header.Get("X-Backend"); got != "b7" {
				t.Errorf("X-Backend = %q", got)
			}
			if got := resp.Header.Get("X-Peer"); got != "127.0.0.1" {
				t.Errorf("X-Peer = %q, want 127.0.0.1", got)
			}
			sha := resp.Header.Get("X-Content-SHA256")
			if (sha != "") != tt.wantSHA {
				t.Fatalf("X-Content-SHA256 = %q, want present %v", sha, tt.wantSHA)
			}
			if tt.wantSHA && tt.method == http.MethodGet {
				sum := sha256.Sum256(body)
				if sha != hex.EncodeToString(sum[:]) {
					t.Errorf("X-Content-SHA256 %s does not match the %d-byte body", sha, len(body))
				}
			}
		})
	}
}

func TestUDPNetworks(t *testing.T) {
	tests := []struct {
		addr    string
		want    []string
		wantErr bool
	}{
		{":53", []string{"udp4", "udp6"}, false},
		{":0", []string{"udp4", "udp6"}, false},
		{"0.0.0.0:53", []string{"udp4"}, false},
		{"198.18.0.100:53", []string{"udp4"}, false},
		{"[::]:53", []string{"udp6"}, false},
		{"[2001:2::100]:53", []string{"udp6"}, false},
		{"53", nil, true},
		{":dns", nil, true},
		{":70000", nil, true},
		{"lab:53", nil, true},
		{"", nil, true},
	}
	for _, tt := range tests {
		got, err := udpNetworks(tt.addr)
		if (err != nil) != tt.wantErr || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("udpNetworks(%q) = %q, %v; want %q, error %v", tt.addr, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestUDPReply(t *testing.T) {
	tests := []struct {
		src  net.Addr
		want string
	}{
		{&net.UDPAddr{IP: net.ParseIP("198.18.0.11"), Port: 4000}, "b1 198.18.0.11:4000\n"},
		{&net.UDPAddr{IP: net.ParseIP("2001:2::11"), Port: 5}, "b1 [2001:2::11]:5\n"},
		{net.UDPAddrFromAddrPort(netip.MustParseAddrPort("[::ffff:198.18.0.12]:6")), "b1 198.18.0.12:6\n"},
	}
	for _, tt := range tests {
		if got := string(udpReply("b1", tt.src)); got != tt.want {
			t.Errorf("udpReply(%v) = %q, want %q", tt.src, got, tt.want)
		}
	}
}

// TestUDPResponderLoopback checks the responder on loopback. The IPv4
// socket is bound to the wildcard address and the client sends to
// 127.0.0.2: without IP_PKTINFO the kernel would answer from 127.0.0.1,
// which the client's connected socket would drop.
func TestUDPResponderLoopback(t *testing.T) {
	u, err := listenUDP(":0", "b9", discardLog)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	errc := make(chan error, 2)
	u.Serve(errc)

	targets := map[string]string{}
	for _, a := range u.Addrs() {
		ua := a.(*net.UDPAddr)
		if ua.IP.To4() != nil {
			targets["udp4"] = net.JoinHostPort("127.0.0.2", strconv.Itoa(ua.Port))
		} else {
			targets["udp6"] = net.JoinHostPort("::1", strconv.Itoa(ua.Port))
		}
	}
	if targets["udp4"] == "" {
		t.Fatal("no IPv4 socket")
	}
	for network, target := range targets {
		t.Run(network, func(t *testing.T) {
			c, err := net.Dial(network, target)
			if err != nil {
				if network == "udp6" {
					t.Skipf("no IPv6 loopback: %v", err)
				}
				t.Fatal(err)
			}
			defer c.Close()
			for i := range 3 {
				if _, err := c.Write([]byte("ping")); err != nil {
					t.Fatal(err)
				}
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				buf := make([]byte, 256)
				n, err := c.Read(buf)
				if err != nil {
					t.Fatalf("datagram %d: %v", i, err)
				}
				want := "b9 " + c.LocalAddr().String() + "\n"
				if got := string(buf[:n]); got != want {
					t.Errorf("reply %q, want %q", got, want)
				}
			}
		})
	}
	u.Close()
	select {
	case err := <-errc:
		t.Errorf("serve: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestRunUsage(t *testing.T) {
	tests := []struct {
		args []string
		want int
	}{
		{[]string{"-h"}, 0},
		{nil, 2},
		{[]string{"-name", "b1", "extra"}, 2},
		{[]string{"-name", "b1", "-udp", "lab:53"}, 2},
		{[]string{"-name", "b1", "-udp", "53"}, 2},
	}
	for _, tt := range tests {
		if got := run(tt.args, io.Discard); got != tt.want {
			t.Errorf("run(%q) = %d, want %d", tt.args, got, tt.want)
		}
	}
}

func TestListenUDPFallback(t *testing.T) {
	tests := []struct {
		name      string
		addr      string
		fail      string // network whose socket cannot be opened
		wantNets  []string
		wantErr   bool
		wantIPv4X bool // the "IPv4 only" warning is logged
	}{
		{"both", ":0", "", []string{"udp4", "udp6"}, false, false},
		{"no IPv6", ":0", "udp6", []string{"udp4"}, false, true},
		{"no IPv4", ":0", "udp4", nil, true, false},
		{"IPv6 address without IPv6", "[::1]:0", "udp6", nil, true, false},
		{"IPv4 address", "127.0.0.1:0", "udp6", []string{"udp4"}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opened []string
			open := func(network, addr string) (udpConn, error) {
				if network == tt.fail {
					return udpConn{}, syscall.EAFNOSUPPORT
				}
				opened = append(opened, network)
				pc, err := net.ListenPacket("udp4", "127.0.0.1:0") // any socket will do
				if err != nil {
					t.Fatal(err)
				}
				return udpConn{pc: pc}, nil
			}
			var logBuf strings.Builder
			u, err := listenUDPWith(open, tt.addr, "b1", slog.New(slog.NewTextHandler(&logBuf, nil)))
			if (err != nil) != tt.wantErr {
				t.Fatalf("error = %v, want error %v", err, tt.wantErr)
			}
			if err == nil {
				defer u.Close()
				if len(u.conns) != len(tt.wantNets) || !reflect.DeepEqual(opened, tt.wantNets) {
					t.Errorf("opened %q (%d sockets kept), want %q", opened, len(u.conns), tt.wantNets)
				}
			}
			if got := strings.Contains(logBuf.String(), "IPv4 only"); got != tt.wantIPv4X {
				t.Errorf("log %q: IPv4-only warning %v, want %v", logBuf.String(), got, tt.wantIPv4X)
			}
		})
	}
}
