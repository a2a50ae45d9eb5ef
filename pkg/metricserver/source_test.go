package metricserver

import (
	"context"
	"net/http"
	"net/netip"
	"os"
	"testing"
	"time"
)

// recordPeers wraps h so that each request's source address is sent on
// the returned channel.
func recordPeers(h http.Handler) (http.Handler, <-chan netip.Addr) {
	peers := make(chan netip.Addr, 16)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
			peers <- ap.Addr().Unmap()
		}
		h.ServeHTTP(w, r)
	}), peers
}

func nextPeer(t *testing.T, peers <-chan netip.Addr) netip.Addr {
	t.Helper()
	select {
	case p := <-peers:
		return p
	case <-time.After(5 * time.Second):
		t.Fatal("no request reached the server")
		return netip.Addr{}
	}
}

// sourceCases are polls of a server on 127.0.0.1 and where they must come
// from: the source asked for, or the kernel's choice (127.0.0.1) without
// one or with one of the other family. The sources alternate, so a
// kept-alive connection from the last one must not be reused.
var sourceCases = []struct{ source, want netip.Addr }{
	{netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.2")},
	{netip.MustParseAddr("127.0.0.3"), netip.MustParseAddr("127.0.0.3")},
	{netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.2")},
	{netip.Addr{}, netip.MustParseAddr("127.0.0.1")},
	{netip.MustParseAddr("::1"), netip.MustParseAddr("127.0.0.1")},
}

// The client's polls leave from FetchOptions.Source.
func TestFetchFromSource(t *testing.T) {
	h, peers := recordPeers(newTestAgent(t, AgentOptions{Name: "web1"}))
	addr := serve(t, h)
	c := NewClient(ClientOptions{})
	defer c.CloseIdleConnections()
	for _, tc := range sourceCases {
		if _, err := c.Fetch(context.Background(), addr, FetchOptions{Secret: testSecret, Source: tc.source}); err != nil {
			t.Fatalf("fetch from %v: %v", tc.source, err)
		}
		if got := nextPeer(t, peers); got != tc.want {
			t.Errorf("fetch from %v came from %v, want %v", tc.source, got, tc.want)
		}
	}
}

// A Prometheus source's scrapes leave from PromOptions.Source.
func TestPromFromSource(t *testing.T) {
	body, err := os.ReadFile("testdata/node_exporter_1.prom")
	if err != nil {
		t.Fatal(err)
	}
	h, peers := recordPeers(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write(body)
	}))
	addr := serve(t, h)
	for _, tc := range sourceCases {
		p, err := NewPromSource("http://"+addr.String()+"/metrics", PromOptions{Source: tc.source})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Fetch(context.Background(), mustQueries(t, "memload")); err != nil {
			t.Fatalf("scrape from %v: %v", tc.source, err)
		}
		if got := nextPeer(t, peers); got != tc.want {
			t.Errorf("scrape from %v came from %v, want %v", tc.source, got, tc.want)
		}
		p.hc.CloseIdleConnections()
	}
}
