package main

import (
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/dlbproject/dlb/pkg/api"
)

// TestBGPTable: the bgp report's table shows the speaker, each session
// (the negotiated hold time while established) and each cluster with the
// reason it is not announced.
func TestBGPTable(t *testing.T) {
	r := api.BGPReport{Configured: true, Running: true, ASN: 65001, RouterID: "198.18.0.2",
		Neighbors: []api.BGPNeighborReport{
			{Address: "198.18.0.1", RemoteAS: 65000, HoldTime: 90, State: "established", UptimeSeconds: 42,
				NegotiatedHoldTime: 9, PrefixesSent: 1, PrefixesReceived: 3, BFD: true, BFDState: "up"},
			{Address: "198.18.0.254", RemoteAS: 65000, HoldTime: 9, State: "active", LastError: "hold timer expired"},
		},
		Clusters: []api.BGPClusterReport{
			{Address: "198.18.0.100", Prefix: "198.18.0.100/32", Announce: true, Announced: true, Communities: []string{"65000:100"}, MED: 5},
			{Address: "198.18.0.101", Prefix: "198.18.0.101/32", Announce: true, Reason: "no server takes new connections"},
		}}
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	bgpTable(w, r)
	w.Flush()
	for _, want := range []string{
		"asn:          65001", "listen port:  none (outgoing sessions only)",
		"198.18.0.1    65000      established  42s     9         up   1     3         -",
		"198.18.0.254  65000      active       -       9         -    0     0         hold timer expired",
		"198.18.0.100/32  yes       yes        65000:100    5    -",
		"198.18.0.101/32  yes       no         -            0    no server takes new connections",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	w = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	bgpTable(w, api.BGPReport{})
	w.Flush()
	if !strings.Contains(b.String(), "not configured") {
		t.Errorf("unconfigured: %q", b.String())
	}
}
