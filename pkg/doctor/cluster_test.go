//go:build linux

package doctor

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// TestPrivilegedARPAnswerers: a dispatcher's namespace holds its NFA and
// a cluster address on its interface; a server's namespace holds its own
// address and, on lo, the cluster address, with arp_ignore=0 (the
// default: a server set up without dlbctl backend setup). Asked from the
// NFA, AddressAnswerers names the server's MAC for the cluster address (the
// conflict) and for the server's address, nobody for an address no one
// has, never the dispatcher's own MAC; asked from an address no
// interface holds, it fails.
func TestPrivilegedARPAnswerers(t *testing.T) {
	testutil.RequirePrivileged(t)
	d, s := testutil.NewNetNS(t, "dlbdpard"), testutil.NewNetNS(t, "dlbdpars")
	testutil.Veth(t, d, "dlbdpar0", s, "dlbdpar1")
	d.Addr(t, "dlbdpar0", "198.18.6.1/24")
	d.Addr(t, "dlbdpar0", "198.18.6.100/32")
	s.Addr(t, "dlbdpar1", "198.18.6.50/24")
	s.Addr(t, "lo", "198.18.6.100/32")
	own, server := d.Link(t, "dlbdpar0").Attrs().HardwareAddr, s.Link(t, "dlbdpar1").Attrs().HardwareAddr
	nfa, vip, srv, nobody := netip.MustParseAddr("198.18.6.1"), netip.MustParseAddr("198.18.6.100"),
		netip.MustParseAddr("198.18.6.50"), netip.MustParseAddr("198.18.6.77")
	var got map[netip.Addr][]net.HardwareAddr
	var fromNowhere error
	err := d.Do(func() error {
		var err error
		got, err = askUntilAnswered(nfa, []netip.Addr{vip, srv, nobody, netip.MustParseAddr("2001:2::1")}, []netip.Addr{vip, srv})
		_, fromNowhere = AddressAnswerers(context.Background(), netip.MustParseAddr("198.18.6.9"), []netip.Addr{srv}, 100*time.Millisecond)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	checkAnswerers(t, got, own, map[netip.Addr]string{vip: server.String(), srv: server.String(), nobody: ""})
	if fromNowhere == nil {
		t.Error("asked from an address no interface holds: want an error")
	}
}

// askUntilAnswered asks AddressAnswerers from src about addrs up to three
// times, until each address of answered has an answer, and returns every
// answer of the questions asked. On a loaded machine a question or its
// answer can be lost (a namespace's veth shares each CPU's backlog with
// other tests' labs); a host never answers for an address it does not
// hold however often it is asked, so the addresses no one should answer
// for are checked against all the answers.
func askUntilAnswered(src netip.Addr, addrs, answered []netip.Addr) (map[netip.Addr][]net.HardwareAddr, error) {
	all := map[netip.Addr][]net.HardwareAddr{}
	for range 3 {
		got, err := AddressAnswerers(context.Background(), src, addrs, 300*time.Millisecond)
		if err != nil {
			return nil, err
		}
		for a, macs := range got {
			for _, m := range macs {
				addAnswerer(all, a, m)
			}
		}
		if !slices.ContainsFunc(answered, func(a netip.Addr) bool { return len(all[a]) == 0 }) {
			break
		}
	}
	return all, nil
}

// checkAnswerers compares the answerers found per address with want: the
// one MAC expected, or none ("").
func checkAnswerers(t *testing.T, got map[netip.Addr][]net.HardwareAddr, own net.HardwareAddr, want map[netip.Addr]string) {
	t.Helper()
	for addr, w := range want {
		var macs []string
		for _, m := range got[addr] {
			macs = append(macs, m.String())
		}
		if w == "" && len(macs) != 0 || w != "" && (len(macs) != 1 || macs[0] != w) {
			t.Errorf("answerers for %v: %v; want %q (never the dispatcher's own %v)", addr, macs, w, own)
		}
	}
}

// TestPrivilegedNDPAnswerers: another host configured with an IPv6
// address this one holds advertises it when asked, and is named by its
// MAC; the same address on a server's loopback is not advertised (Linux
// answers solicitations only for the receiving interface's addresses), nor
// is one no host holds; the dispatcher's own answer never counts, IPv4
// addresses are skipped, and a source no interface holds is an error.
// From an IPv4 source, the same list is asked by ARP.
func TestPrivilegedNDPAnswerers(t *testing.T) {
	testutil.RequirePrivileged(t)
	d, s := testutil.NewNetNS(t, "dlbdpnd"), testutil.NewNetNS(t, "dlbdpns")
	testutil.Veth(t, d, "dlbdpn0", s, "dlbdpn1")
	d.Addr(t, "dlbdpn0", "2001:2:6::1/64")
	d.Addr(t, "dlbdpn0", "2001:2:6::100/128")
	d.Addr(t, "dlbdpn0", "2001:2:6::101/128")
	d.Addr(t, "dlbdpn0", "198.18.6.1/24")
	s.Addr(t, "dlbdpn1", "2001:2:6::50/64")
	s.Addr(t, "lo", "2001:2:6::100/128")
	s.Addr(t, "dlbdpn1", "2001:2:6::101/128")
	s.Addr(t, "dlbdpn1", "198.18.6.50/24")
	own, server := d.Link(t, "dlbdpn0").Attrs().HardwareAddr, s.Link(t, "dlbdpn1").Attrs().HardwareAddr
	nfa, onLoopback, onInterface, srv, nobody := netip.MustParseAddr("2001:2:6::1"), netip.MustParseAddr("2001:2:6::100"),
		netip.MustParseAddr("2001:2:6::101"), netip.MustParseAddr("2001:2:6::50"), netip.MustParseAddr("2001:2:6::77")
	v4 := netip.MustParseAddr("198.18.6.50")
	var got, byFamily map[netip.Addr][]net.HardwareAddr
	var fromNowhere error
	err := d.Do(func() error {
		var err error
		if got, err = askUntilAnswered(nfa, []netip.Addr{onLoopback, onInterface, srv, nobody, v4}, []netip.Addr{onInterface, srv}); err != nil {
			return err
		}
		_, fromNowhere = AddressAnswerers(context.Background(), netip.MustParseAddr("2001:2:6::9"), []netip.Addr{srv}, 100*time.Millisecond)
		byFamily, err = askUntilAnswered(netip.MustParseAddr("198.18.6.1"), []netip.Addr{v4, srv}, []netip.Addr{v4})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	checkAnswerers(t, got, own, map[netip.Addr]string{onLoopback: "", onInterface: server.String(), srv: server.String(),
		nobody: "", v4: ""})
	if fromNowhere == nil {
		t.Error("asked from an address no interface holds: want an error")
	}
	if len(byFamily[v4]) != 1 || len(byFamily[srv]) != 0 {
		t.Errorf("AddressAnswerers from an IPv4 source: %v; want ARP's answer for %v only", byFamily, v4)
	}
}

// TestPrivilegedProbeCluster: a server namespace holds the cluster
// addresses (IPv4 and IPv6) on its loopback and listens on them: the probe
// finds its MAC (by ARP, by a neighbour solicitation) and gets a SYN-ACK
// from the cluster address. Without the address on the loopback nothing
// answers; on a port nothing listens on, a reset; a server no one holds
// has no MAC; addresses of two families are refused before anything is
// sent.
func TestPrivilegedProbeCluster(t *testing.T) {
	testutil.RequirePrivileged(t)
	d, s := testutil.NewNetNS(t, "dlbdpcd"), testutil.NewNetNS(t, "dlbdpcs")
	testutil.Veth(t, d, "dlbdpc0", s, "dlbdpc1")
	for _, a := range []string{"198.18.6.1/24", "2001:2:6::1/64"} {
		d.Addr(t, "dlbdpc0", a)
	}
	for _, a := range []string{"198.18.6.50/24", "2001:2:6::50/64"} {
		s.Addr(t, "dlbdpc1", a)
	}
	for _, a := range []string{"198.18.6.100/32", "2001:2:6::100/128"} {
		s.Addr(t, "lo", a)
	}
	var ln net.Listener
	if err := s.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", ":8080") // both families
		return err
	}); err != nil {
		t.Fatal(err)
	}
	testutil.AcceptAndClose(t, ln)
	serverMAC := s.Link(t, "dlbdpc1").Attrs().HardwareAddr.String()
	a := netip.MustParseAddr
	for _, tc := range []struct {
		name              string
		src, vip, server  string
		port              uint16
		wantMAC, wantKind string
		wantFrom          string
		wantErr           string
	}{
		{"IPv4", "198.18.6.1", "198.18.6.100", "198.18.6.50", 8080, serverMAC, "synack", "198.18.6.100", ""},
		{"IPv6", "2001:2:6::1", "2001:2:6::100", "2001:2:6::50", 8080, serverMAC, "synack", "2001:2:6::100", ""},
		{"IPv6 address not on the loopback", "2001:2:6::1", "2001:2:6::101", "2001:2:6::50", 8080, serverMAC, "", "", ""},
		{"IPv6 port closed", "2001:2:6::1", "2001:2:6::100", "2001:2:6::50", 8081, serverMAC, "rst", "2001:2:6::100", ""},
		{"IPv6 server no one holds", "2001:2:6::1", "2001:2:6::100", "2001:2:6::77", 8080, "", "", "", ""},
		{"two families", "198.18.6.1", "2001:2:6::100", "2001:2:6::50", 8080, "", "", "", "not of one family"},
	} {
		var p ClusterProbe
		err := d.Do(func() error {
			var err error
			p, err = ProbeCluster(context.Background(), a(tc.src), a(tc.vip), tc.port, a(tc.server), 600*time.Millisecond)
			return err
		})
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: %v; want an error saying %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		from := ""
		if p.From.IsValid() {
			from = p.From.String()
		}
		if p.ServerMAC.String() != tc.wantMAC || p.Answer != tc.wantKind || from != tc.wantFrom {
			t.Errorf("%s: MAC %q, answer %q from %q; want %q, %q from %q", tc.name, p.ServerMAC, p.Answer, from,
				tc.wantMAC, tc.wantKind, tc.wantFrom)
		}
	}
}
