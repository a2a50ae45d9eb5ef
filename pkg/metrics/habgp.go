package metrics

import (
	"maps"
	"slices"

	"github.com/dlbproject/dlb/pkg/dispatcher"
	"github.com/dlbproject/dlb/pkg/lb"
)

// writeWarnings writes how many warnings the executor report has.
func writeWarnings(t *textWriter, st *dispatcher.Status) {
	t.family("dlb_warnings", "gauge", "Conditions that keep the configuration from working as meant, while they last "+
		"(the warnings of dlbctl executor report, which says each with its remedy).")
	t.sample("dlb_warnings", nil, nil, float64(len(st.Executor.Warnings)))
}

// writeHA writes high availability's families, when it is configured.
func writeHA(t *textWriter, st *dispatcher.Status) {
	if st.HA == nil || len(st.HA.Config.Groups()) == 0 {
		return
	}
	n := &st.HA.Node
	t.family("dlb_ha_running", "gauge", "Whether heartbeats are exchanged (high availability configured and its sockets open).")
	t.sample("dlb_ha_running", nil, nil, bool01(n.Running))
	t.family("dlb_ha_healthy", "gauge", "Whether this dispatcher's executor can forward, as its heartbeats say.")
	t.sample("dlb_ha_healthy", nil, nil, bool01(n.Healthy))
	t.family("dlb_ha_state", "gauge", "1, labelled with a group's state on this dispatcher: idle, listen, active, standby, "+
		"preempt or noexecutor (group local: the clusters it is the preferred active for; peer: the others).")
	for _, g := range n.Groups {
		t.sample("dlb_ha_state", labels("group", g.Group.String(), "state", g.State.String()), nil, 1)
	}
	t.family("dlb_ha_synced", "gauge", "Whether this dispatcher holds a full copy of the active peer's connection tables "+
		"for a group (what a standby needs to take over without breaking connections).")
	for _, g := range n.Groups {
		t.sample("dlb_ha_synced", labels("group", g.Group.String()), nil, bool01(g.Synced))
	}
	t.family("dlb_ha_peer_alive", "gauge", "Whether the peer is heard (or restarting within its grace).")
	t.sample("dlb_ha_peer_alive", nil, nil, bool01(n.Peer.Alive))
	if n.Peer.Alive {
		t.family("dlb_ha_config_digest_match", "gauge", "Whether the peer serves the same clusters, ports and servers "+
			"(their configuration digests are equal); absent while the peer is not heard.")
		t.sample("dlb_ha_config_digest_match", nil, nil, bool01(st.HA.DigestMatch))
		t.family("dlb_ha_role_conflict", "gauge", "Whether the peer's role is inconsistent with this dispatcher's "+
			"(both primary, both backup, or one both and the other not): which serves is then decided by chance; absent while the peer is not heard.")
		t.sample("dlb_ha_role_conflict", nil, nil, bool01(n.Peer.Conflict != ""))
	}
	if len(n.Reach) > 0 {
		t.family("dlb_ha_reach_target_up", "gauge", "Whether a reach target answers this dispatcher's pings.")
		for _, r := range n.Reach {
			t.sample("dlb_ha_reach_target_up", labels("address", r.Address.String()), nil, bool01(r.Reachable))
		}
	}
	if len(n.Stray) > 0 {
		t.family("dlb_ha_stray_heartbeats", "gauge", "1 for a path this dispatcher does not have (source its own address, "+
			"destination the peer's) that the peer's authenticated heartbeats arrived on in the last minute: the two "+
			"dispatchers' heartbeat paths differ; absent when none.")
		for _, p := range n.Stray {
			t.sample("dlb_ha_stray_heartbeats", heartbeatLabels(p.Heartbeat), nil, 1)
		}
	}
	t.family("dlb_ha_heartbeats_sent_total", "counter", "Heartbeats sent on a path (source and destination address).")
	for _, p := range n.Heartbeats {
		t.counter("dlb_ha_heartbeats_sent_total", heartbeatLabels(p.Heartbeat), nil, p.Sent)
	}
	t.family("dlb_ha_heartbeats_received_total", "counter", "Heartbeats received on a path.")
	for _, p := range n.Heartbeats {
		t.counter("dlb_ha_heartbeats_received_total", heartbeatLabels(p.Heartbeat), nil, p.Received)
	}
	t.family("dlb_ha_refused_total", "counter", "Heartbeats and replication frames refused, by reason "+
		"(malformed, unauthenticated, replayed, unconfirmed boot).")
	for _, reason := range slices.Sorted(maps.Keys(n.Refused)) {
		t.counter("dlb_ha_refused_total", labels("reason", reason), nil, n.Refused[reason])
	}
	rep := &n.Replication
	t.family("dlb_ha_replication_records_sent_total", "counter", "Connection records sent to the peer.")
	t.counter("dlb_ha_replication_records_sent_total", nil, nil, rep.SentRecords)
	t.family("dlb_ha_replication_records_received_total", "counter", "Connection records received from the peer.")
	t.counter("dlb_ha_replication_records_received_total", nil, nil, rep.ReceivedRecords)
	t.family("dlb_ha_replication_records_imported_total", "counter", "Received connection records written to the executor.")
	t.counter("dlb_ha_replication_records_imported_total", nil, nil, st.HA.Imported)
	t.family("dlb_ha_replication_records_merged_total", "counter", "Received connection records of groups this dispatcher "+
		"served too (a partition that healed), by result: written, or kept (not written: this executor held the key already, for the same connection or another used since).")
	t.counter("dlb_ha_replication_records_merged_total", labels("result", "written"), nil, st.HA.Merged)
	t.counter("dlb_ha_replication_records_merged_total", labels("result", "kept"), nil, st.HA.Kept)
	t.family("dlb_ha_replication_ack_seconds", "gauge", "How long the latest replication marker took to be acknowledged "+
		"by the peer once it had imported everything before it.")
	t.sample("dlb_ha_replication_ack_seconds", nil, nil, rep.LastAckRTT.Seconds())
}

// heartbeatLabels are a heartbeat path's labels.
func heartbeatLabels(h lb.Heartbeat) []byte {
	return labels("source", h.Source.String(), "destination", h.Destination.String())
}

// writeBGP writes the BGP speaker's families, when it has neighbours or
// clusters to announce.
func writeBGP(t *textWriter, st *dispatcher.Status) {
	if st.BGP == nil {
		return
	}
	var announce []lb.Cluster
	for _, cl := range st.Config.Clusters {
		if cl.Announce {
			announce = append(announce, cl)
		}
	}
	if len(st.BGP.Neighbors) == 0 && len(announce) == 0 && !st.BGP.Running {
		return
	}
	t.family("dlb_bgp_running", "gauge", "Whether the BGP speaker runs.")
	t.sample("dlb_bgp_running", nil, nil, bool01(st.BGP.Running))
	if len(st.BGP.Neighbors) > 0 {
		t.family("dlb_bgp_neighbor_up", "gauge", "Whether the session with a neighbour is established.")
		for _, nb := range st.BGP.Neighbors {
			t.sample("dlb_bgp_neighbor_up", labels("neighbor", nb.Address.String()), nil, bool01(nb.State == "established"))
		}
		t.family("dlb_bgp_neighbor_prefixes_sent", "gauge", "Prefixes advertised to a neighbour.")
		for _, nb := range st.BGP.Neighbors {
			t.counter("dlb_bgp_neighbor_prefixes_sent", labels("neighbor", nb.Address.String()), nil, nb.Sent)
		}
	}
	if len(announce) > 0 {
		t.family("dlb_bgp_cluster_announced", "gauge", "Whether a cluster configured to be announced is announced now "+
			"(it is withdrawn while no server takes new connections, among other reasons: dlbctl bgp report says which).")
		for _, cl := range announce {
			why, known := st.BGP.Clusters[cl.Address] // "" when announced
			t.sample("dlb_bgp_cluster_announced", labels("cluster", cl.Address.String()), nil, bool01(known && why == ""))
		}
	}
}
