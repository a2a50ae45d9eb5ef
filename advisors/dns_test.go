package advisors

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestParseDNSRequest(t *testing.T) {
	tests := []struct {
		in       string
		ok       bool
		name     string
		qtype    uint16
		explicit bool
	}{
		{"", true, ".", dns.TypeNS, false},
		{"dlb.test", true, "dlb.test.", dns.TypeA, true},
		{"dlb.test.", true, "dlb.test.", dns.TypeA, true},
		{"dlb.test aaaa", true, "dlb.test.", dns.TypeAAAA, true},
		{"  example.test   MX ", true, "example.test.", dns.TypeMX, true},
		{". SOA", true, ".", dns.TypeSOA, true},
		{"dlb.test BOGUS", false, "", 0, false},
		{"dlb.test A IN", false, "", 0, false},
		{"bad..name", false, "", 0, false},
		{strings.Repeat("a", 64) + ".test", false, "", 0, false},
	}
	for _, tc := range tests {
		q, err := parseDNSRequest(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("parseDNSRequest(%q) error %v, want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if tc.ok && (q.name != tc.name || q.qtype != tc.qtype || q.explicit != tc.explicit) {
			t.Errorf("parseDNSRequest(%q) = %+v", tc.in, q)
		}
	}
}

// startDnsmasq runs a real dnsmasq on 127.0.0.1 (a random high port) that
// answers 198.18.5.5 for dlb.test and its subdomains, NXDOMAIN for
// nx.test, and REFUSED for everything else. It returns the port.
func startDnsmasq(t *testing.T) uint16 {
	t.Helper()
	bin := requireTool(t, "dnsmasq", "dnsmasq-base")
	for attempt := 0; attempt < 3; attempt++ {
		port := freePort(t, "udp")
		cmd := startProcess(t, bin, "--no-daemon", "--conf-file=/dev/null", fmt.Sprintf("--port=%d", port),
			"--listen-address=127.0.0.1", "--bind-interfaces", "--no-resolv", "--no-hosts",
			"--address=/dlb.test/198.18.5.5", "--address=/nx.test/")
		// Wait until it answers (or has died, e.g. the port was taken).
		a := dnsAdvisor{}
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			tg := loTarget(port)
			tg.ReceiveTimeout = 200 * time.Millisecond
			if a.Probe(context.Background(), tg).Up {
				return port
			}
			if cmd.ProcessState != nil || processGone(cmd.Process.Pid) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Fatal("dnsmasq did not start")
	return 0
}

// processGone reports whether pid has exited (or is a zombie).
func processGone(pid int) bool {
	var st string
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		st = string(b)
	}
	if i := strings.LastIndexByte(st, ')'); i >= 0 && i+2 < len(st) {
		return st[i+2] == 'Z'
	}
	return true
}

func TestDNSDnsmasq(t *testing.T) {
	port := startDnsmasq(t)
	a, _ := New("dns")
	tests := []struct {
		request, response string
		up                bool
		reason            string
	}{
		{"", "", true, ""}, // ". NS": REFUSED, but any answer is up
		{"dlb.test", "", true, ""},
		{"dlb.test A", "198.18.5.5", true, ""},
		{"www.DLB.test", "198.18.5.5", true, ""},
		{"dlb.test", "DLB.TEST.", true, ""}, // case-insensitive
		{"dlb.test", "10.0.0.1", false, `answer does not contain "10.0.0.1"`},
		{"nx.test", "", true, ""}, // NXDOMAIN is an answer
		{"nx.test", "198.18.5.5", false, `answer does not contain "198.18.5.5"`},
		{"other.example", "", false, "DNS rcode REFUSED"},
		{". SOA", "", false, "DNS rcode REFUSED"},
		{"dlb.test BOGUS", "", false, `bad advisorrequest: unknown type "BOGUS"`},
	}
	for _, tc := range tests {
		tg := loTarget(port)
		tg.Request, tg.Response = tc.request, tc.response
		r, el := probeTimed(t, a, tg)
		if r.Up != tc.up || r.Reason != tc.reason {
			t.Errorf("%q/%q: got %+v, want up=%v reason %q", tc.request, tc.response, r, tc.up, tc.reason)
		}
		if r.Up && (r.Load <= 0 || r.Load > el) {
			t.Errorf("%q: load %v not in (0, %v]", tc.request, r.Load, el)
		}
		t.Logf("%q/%q: %+v in %v", tc.request, tc.response, r, el)
	}
}

// udpServer answers datagrams on 127.0.0.1 with reply (nil: no answer;
// several datagrams: all of them). It stops when tb ends.
func udpServer(tb testing.TB, reply func(query []byte) [][]byte) uint16 {
	tb.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 65536)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			for _, d := range reply(buf[:n]) {
				if _, err := pc.WriteTo(d, from); err != nil {
					return
				}
			}
		}
	}()
	tb.Cleanup(func() {
		pc.Close()
		wg.Wait()
	})
	return portOf(tb, pc.LocalAddr())
}

// dnsAnswer returns query's reply with rcode and, for NOERROR, one A
// record; edit may change it before packing.
func dnsAnswer(query []byte, rcode int, edit func(*dns.Msg)) [][]byte {
	q := new(dns.Msg)
	if err := q.Unpack(query); err != nil {
		return nil
	}
	m := new(dns.Msg)
	m.SetRcode(q, rcode)
	if rcode == dns.RcodeSuccess {
		rr, _ := dns.NewRR(q.Question[0].Name + " 60 IN A 198.18.5.6")
		m.Answer = append(m.Answer, rr)
	}
	if edit != nil {
		edit(m)
	}
	b, _ := m.Pack()
	return [][]byte{b}
}

// TestDNSHostile runs hostile and odd UDP servers against the dns advisor.
func TestDNSHostile(t *testing.T) {
	tests := []struct {
		name   string
		reply  func(query []byte) [][]byte
		up     bool
		reason string // prefix
	}{
		{"good", func(q []byte) [][]byte { return dnsAnswer(q, dns.RcodeSuccess, nil) }, true, ""},
		{"silent", func(q []byte) [][]byte { return nil }, false, "no reply within 1s"},
		{"servfail", func(q []byte) [][]byte { return dnsAnswer(q, dns.RcodeServerFailure, nil) }, false, "DNS rcode SERVFAIL"},
		{"notimp", func(q []byte) [][]byte { return dnsAnswer(q, dns.RcodeNotImplemented, nil) }, false, "DNS rcode NOTIMP"},
		{"empty datagram", func(q []byte) [][]byte { return [][]byte{{}} }, false, "bad DNS reply: "},
		{"random bytes", func(q []byte) [][]byte { return [][]byte{webHostileRandom[:512]} }, false, "bad DNS reply: "},
		{"64 KiB of noise", func(q []byte) [][]byte { return [][]byte{webHostileRandom[:65507]} }, false, "bad DNS reply: "},
		{"header only, claims a question", func(q []byte) [][]byte {
			h := append([]byte(nil), q[:12]...)
			h[2] |= 0x80 // QR
			return [][]byte{h}
		}, false, "bad DNS reply: "},
		{"echoes the query (QR clear)", func(q []byte) [][]byte { return [][]byte{q} }, false, "no reply within 1s"},
		{"wrong ID flood, then silence", func(q []byte) [][]byte {
			var out [][]byte
			for i := range 100 {
				out = append(out, dnsAnswer(q, dns.RcodeSuccess, func(m *dns.Msg) { m.Id += uint16(i + 1) })...)
			}
			return out
		}, false, "no reply within 1s"},
		{"wrong question", func(q []byte) [][]byte {
			return dnsAnswer(q, dns.RcodeSuccess, func(m *dns.Msg) { m.Question[0].Name = "evil.test." })
		}, false, "no reply within 1s"},
		{"wrong ID, then the answer", func(q []byte) [][]byte {
			bad := dnsAnswer(q, dns.RcodeSuccess, func(m *dns.Msg) { m.Id++ })
			return append(bad, dnsAnswer(q, dns.RcodeSuccess, nil)...)
		}, true, ""},
		{"truncated (TC) reply", func(q []byte) [][]byte {
			return dnsAnswer(q, dns.RcodeSuccess, func(m *dns.Msg) { m.Truncated = true; m.Answer = nil })
		}, true, ""},
	}
	a, _ := New("dns")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tg := loTarget(udpServer(t, tc.reply))
			tg.Request = "dlb.test A"
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			r, el := probeTimed(t, a, tg)
			runtime.ReadMemStats(&after)
			if r.Up != tc.up || !strings.HasPrefix(r.Reason, tc.reason) || tc.up && r.Reason != "" {
				t.Fatalf("got %+v, want up=%v reason %q", r, tc.up, tc.reason)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
				t.Errorf("probe allocated %d bytes", alloc)
			}
			t.Logf("%+v in %v, allocated %d KiB", r, el.Round(time.Millisecond), (after.TotalAlloc-before.TotalAlloc)>>10)
		})
	}
	t.Run("port unreachable", func(t *testing.T) {
		tg := loTarget(freePort(t, "udp"))
		r, el := probeTimed(t, a, tg)
		if r.Up || r.Reason != "port unreachable" {
			t.Fatalf("got %+v", r)
		}
		t.Logf("%+v in %v", r, el)
	})
	t.Run("canceled", func(t *testing.T) {
		tg := loTarget(udpServer(t, func([]byte) [][]byte { return nil }))
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		start := time.Now()
		r := a.Probe(ctx, tg)
		if r.Up || r.Reason != "canceled" || time.Since(start) > 500*time.Millisecond {
			t.Fatalf("got %+v after %v", r, time.Since(start))
		}
	})
}
