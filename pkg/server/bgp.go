package server

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/dispatcher"
	"github.com/dlbproject/dlb/pkg/lb"
)

// bgpReport renders the BGP speaker's sessions and each cluster's
// announcement.
func bgpReport(st *dispatcher.Status) api.BGPReport {
	b := st.Config.BGP
	r := api.BGPReport{Configured: b.Enabled(), ASN: b.ASN, RouterID: addrString(b.RouterID), ListenPort: b.ListenPort,
		Neighbors: []api.BGPNeighborReport{}, Clusters: []api.BGPClusterReport{}}
	bs := st.BGP
	if bs == nil {
		return r
	}
	r.Running, r.Error = bs.Running, bs.BGPStatus.Err
	if r.Error == "" {
		r.Error = bs.Err
	}
	live := map[netip.Addr]lb.BGPNeighborStatus{}
	for _, n := range bs.Neighbors {
		live[n.Address] = n
	}
	for _, n := range b.Neighbors {
		nr := api.BGPNeighborReport{Address: n.Address.String(), Port: n.RemotePort(), RemoteAS: n.RemoteAS,
			HoldTime: n.HoldTime, Multihop: n.Multihop, PasswordFile: n.PasswordFile, State: "idle", BFD: n.BFD}
		if s, ok := live[n.Address]; ok {
			nr.State, nr.LastError = s.State, s.LastError
			nr.PrefixesSent, nr.PrefixesReceived = s.Sent, s.Received
			nr.NegotiatedHoldTime = s.HoldTime
			nr.BFDState = s.BFD
			if !s.Since.IsZero() {
				nr.Since = s.Since.UTC().Format(time.RFC3339)
				nr.UptimeSeconds = st.Now.Sub(s.Since).Round(time.Millisecond).Seconds()
			}
		}
		r.Neighbors = append(r.Neighbors, nr)
	}
	for _, cl := range st.Config.Clusters {
		reason, listed := bs.Clusters[cl.Address]
		c := api.BGPClusterReport{Address: cl.Address.String(), Announce: cl.Announce,
			Prefix: netip.PrefixFrom(cl.Address, cl.Address.BitLen()).String(), Communities: cl.Communities, MED: cl.MED}
		c.Announced = listed && reason == ""
		c.Reason = reason
		if r, ok := bs.Standby[cl.Address]; ok {
			c.Standby, c.AnnouncedMED = true, r.MED
		}
		r.Clusters = append(r.Clusters, c)
	}
	return r
}

// digestString formats a Maglev table's digest ("" for none).
func digestString(d uint64) string {
	if d == 0 {
		return ""
	}
	return fmt.Sprintf("%016x", d)
}
