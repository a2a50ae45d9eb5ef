package console

import (
	"time"

	"github.com/dlbproject/dlb/pkg/dispatcher"
	"github.com/dlbproject/dlb/pkg/lb"
)

// HAView is high availability's state on this dispatcher: what decides
// whether it serves its clusters, and whether a takeover would keep the
// connections.
type HAView struct {
	Role     string `json:"role"`
	Recovery string `json:"recovery"`
	// Running says heartbeats are exchanged; Error why not.
	Running bool   `json:"running"`
	Error   string `json:"error,omitempty"`
	// Healthy says this dispatcher's executor can forward; HealthReason
	// why not.
	Healthy      bool          `json:"healthy"`
	HealthReason string        `json:"health_reason,omitempty"`
	Groups       []HAGroupView `json:"groups"`
	Peer         HAPeerView    `json:"peer"`
	Reach        []ReachView   `json:"reach"`
	// Stray names the paths the peer's heartbeats arrive on that this
	// dispatcher lacks ("from PEER to THIS"): their paths differ.
	Stray []string `json:"stray"`
}

// HAGroupView is one group of clusters: those this dispatcher is the
// preferred active for (local) or its peer is (peer).
type HAGroupView struct {
	Group  string    `json:"group"`
	State  string    `json:"state"`
	Since  time.Time `json:"since"`
	Reason string    `json:"reason,omitempty"`
	// Synced says this dispatcher holds a full copy of the active peer's
	// connection tables for the group.
	Synced   bool     `json:"synced"`
	Clusters []string `json:"clusters"`
}

// HAPeerView is the peer as its heartbeats describe it.
type HAPeerView struct {
	// Alive says it is heard (or restarting within its grace); Heard
	// that it ever was, LastHeard when.
	Alive     bool      `json:"alive"`
	Heard     bool      `json:"heard"`
	LastHeard time.Time `json:"last_heard"`
	Role      string    `json:"role,omitempty"`
	Healthy   bool      `json:"healthy"`
	// SameConfig says it serves the same clusters, ports and servers
	// (equal configuration digests); meaningful while it is alive.
	SameConfig bool `json:"same_config"`
	// Reach of Targets reach targets answer it.
	Reach    int    `json:"reach"`
	Targets  int    `json:"targets"`
	Conflict string `json:"conflict,omitempty"`
}

// ReachView is a reach target as this dispatcher sees it.
type ReachView struct {
	Address string `json:"address"`
	Up      bool   `json:"up"`
	Error   string `json:"error,omitempty"`
}

// BGPView is the BGP speaker: its sessions and the clusters it announces.
type BGPView struct {
	Running   bool               `json:"running"`
	Error     string             `json:"error,omitempty"`
	Neighbors []BGPNeighborView  `json:"neighbors"`
	Clusters  []AnnouncementView `json:"clusters"`
}

// BGPNeighborView is one session.
type BGPNeighborView struct {
	Address string `json:"address"`
	State   string `json:"state"`
	// Since is when the session was established (zero: it is not).
	Since     time.Time `json:"since"`
	Sent      uint64    `json:"prefixes_sent"`
	LastError string    `json:"last_error,omitempty"`
	BFD       string    `json:"bfd,omitempty"`
}

// AnnouncementView is a cluster configured to be announced: whether it is
// now, and why not.
type AnnouncementView struct {
	Address   string `json:"address"`
	Announced bool   `json:"announced"`
	Reason    string `json:"reason,omitempty"`
}

// haView translates high availability's status; nil when nothing of it is
// configured.
func haView(st *dispatcher.HAStatus) *HAView {
	if st == nil || !st.Config.Configured() {
		return nil
	}
	n := &st.Node
	v := &HAView{Role: st.Config.Role.String(), Recovery: st.Config.Recovery.String(), Running: n.Running, Error: n.Error,
		Healthy: n.Healthy, HealthReason: n.HealthReason, Groups: []HAGroupView{}, Reach: []ReachView{}, Stray: []string{}}
	for _, p := range n.Stray {
		v.Stray = append(v.Stray, "from "+p.Destination.String()+" to "+p.Source.String())
	}
	for _, g := range n.Groups {
		clusters := st.Clusters[g.Group]
		if clusters == nil {
			clusters = []string{}
		}
		v.Groups = append(v.Groups, HAGroupView{Group: g.Group.String(), State: g.State.String(), Since: g.Since, Reason: g.Reason,
			Synced: g.Synced, Clusters: clusters})
	}
	p := &n.Peer
	v.Peer = HAPeerView{Alive: p.Alive, Heard: p.Heard, LastHeard: p.LastHeard, Healthy: p.Healthy, SameConfig: st.DigestMatch,
		Reach: p.Reach, Targets: p.Targets, Conflict: p.Conflict}
	if p.Heard {
		v.Peer.Role = p.Role.String()
	}
	for _, r := range n.Reach {
		v.Reach = append(v.Reach, ReachView{Address: r.Address.String(), Up: r.Reachable, Error: r.LastError})
	}
	return v
}

// bgpView translates the speaker's status; nil when it has no neighbour,
// nothing to announce and does not run (as dlb_bgp_* in /metrics).
func bgpView(st *dispatcher.BGPStatus, cfg lb.Config) *BGPView {
	if st == nil {
		return nil
	}
	v := &BGPView{Running: st.Running, Error: st.BGPStatus.Err, Neighbors: []BGPNeighborView{}, Clusters: []AnnouncementView{}}
	if st.Err != "" {
		v.Error = st.Err
	}
	for _, nb := range st.Neighbors {
		v.Neighbors = append(v.Neighbors, BGPNeighborView{Address: nb.Address.String(), State: nb.State, Since: nb.Since,
			Sent: nb.Sent, LastError: nb.LastError, BFD: nb.BFD})
	}
	for _, cl := range cfg.Clusters {
		if !cl.Announce {
			continue
		}
		why, known := st.Clusters[cl.Address] // "" when announced
		if !known {
			why = "not reported by the engine"
		}
		v.Clusters = append(v.Clusters, AnnouncementView{Address: cl.Address.String(), Announced: why == "", Reason: why})
	}
	if len(v.Neighbors) == 0 && len(v.Clusters) == 0 && !v.Running {
		return nil
	}
	return v
}
