package config

import (
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dlbproject/dlb/pkg/lb"
)

// High availability: "highavailability heartbeat|backup|reach ..." in
// dlbctl, the objects heartbeat, backup and reach here.

// applyHeartbeat applies "heartbeat add DEST --source SRC [--secretfile F]
// [--interval MS] [--count N]", "heartbeat set [--secretfile F]
// [--interval MS] [--count N]" and "heartbeat remove DEST [--source SRC]".
// The secret file, interval and count are shared by every heartbeat: add
// sets them when given, and refuses values that differ from the other
// heartbeats' (set changes them for all).
func applyHeartbeat(d *draft, op *Op, p *params) error {
	h := d.cfg.HA.Clone()
	shared := func(first bool) (bool, error) {
		any := false
		if s, ok, err := p.str("secretfile"); err != nil {
			return false, err
		} else if ok {
			if s == "none" {
				s = ""
			}
			if !first && h.SecretFile != "" && s != h.SecretFile && op.Action == Add {
				return false, lb.Errorf("secretfile", "", "heartbeats share one secret file (now %s): change it with highavailability heartbeat set", h.SecretFile)
			}
			h.SecretFile, any = s, true
		}
		if v, ok, err := p.ranged("interval", "", lb.MinHAInterval, lb.MaxHAInterval); err != nil {
			return false, err
		} else if ok {
			if !first && h.Interval != 0 && v != h.Interval && op.Action == Add {
				return false, lb.Errorf("interval", "", "heartbeats share one interval (now %d ms): change it with highavailability heartbeat set", h.Interval)
			}
			h.Interval, any = v, true
		}
		if v, ok, err := p.ranged("count", "", lb.MinHACount, lb.MaxHACount); err != nil {
			return false, err
		} else if ok {
			if !first && h.Count != 0 && v != h.Count && op.Action == Add {
				return false, lb.Errorf("count", "", "heartbeats share one count (now %d): change it with highavailability heartbeat set", h.Count)
			}
			h.Count, any = v, true
		}
		return any, nil
	}
	switch op.Action {
	case Add:
		dest, err := parseAddr("destination", "", op.Target)
		if err != nil {
			return err
		}
		src, srcOK, err := p.addr("source", "")
		if err != nil {
			return err
		}
		if !dest.IsValid() || !srcOK || !src.IsValid() {
			return lb.Errorf("heartbeat", "", "heartbeat add needs a source (this dispatcher's address) and a destination (the peer's)")
		}
		if _, err := shared(len(h.Heartbeats) == 0); err != nil {
			return err
		}
		hb := lb.Heartbeat{Source: src, Destination: dest}
		if slices.Contains(h.Heartbeats, hb) {
			return lb.Errorf("heartbeat", src.String()+"/"+dest.String(), "already exists")
		}
		h.Heartbeats = append(h.Heartbeats, hb)
		h.Sort()
		if h.Interval == 0 {
			h.Interval = lb.DefaultHAInterval
		}
		if h.Count == 0 {
			h.Count = lb.DefaultHACount
		}
	case Set:
		if op.Target != "" {
			return lb.Errorf("target", "", "heartbeat set takes no target (got %q)", op.Target)
		}
		any, err := shared(true)
		if err != nil {
			return err
		}
		if !any {
			return lb.Errorf("interval", "", "heartbeat set needs --secret-file, --interval or --count")
		}
		if len(h.Heartbeats) == 0 {
			return lb.Errorf("heartbeat", "", "no heartbeat is configured: add one first (highavailability heartbeat add)")
		}
	case Remove:
		dest, err := parseAddr("destination", "", op.Target)
		if err != nil {
			return err
		}
		src, srcOK, err := p.addr("source", "")
		if err != nil {
			return err
		}
		n := len(h.Heartbeats)
		h.Heartbeats = slices.DeleteFunc(h.Heartbeats, func(hb lb.Heartbeat) bool {
			return (!dest.IsValid() || hb.Destination == dest) && (!srcOK || !src.IsValid() || hb.Source == src)
		})
		if len(h.Heartbeats) == n {
			if !dest.IsValid() {
				return lb.Errorf("heartbeat", "", "no heartbeat is configured")
			}
			return lb.Errorf("heartbeat", dest.String(), "no heartbeat goes to this destination")
		}
		if len(h.Heartbeats) == 0 {
			// The shared settings go with the last heartbeat.
			h.Heartbeats, h.SecretFile, h.Interval, h.Count = nil, "", 0, 0
		}
	default:
		return badAction(op)
	}
	d.cfg.HA = h
	return nil
}

// applyBackup applies "backup add --role R --recovery S --haport PORT",
// "backup set" with any of the three, and "backup remove".
func applyBackup(d *draft, op *Op, p *params) error {
	if op.Target != "" {
		return lb.Errorf("target", "", "backup %s takes no target (got %q)", op.Action, op.Target)
	}
	h := d.cfg.HA.Clone()
	switch op.Action {
	case Add, Set:
		role, roleOK, err := p.str("role")
		if err != nil {
			return err
		}
		rec, recOK, err := p.str("recovery")
		if err != nil {
			return err
		}
		port, portOK, err := p.ranged("haport", "", 1, 65535)
		if err != nil {
			return err
		}
		switch {
		case op.Action == Add && (!roleOK || !recOK || !portOK):
			return lb.Errorf("role", "", "backup add needs a role (primary, backup or both), a recovery strategy (auto or manual) and a port")
		case op.Action == Set && !roleOK && !recOK && !portOK:
			return lb.Errorf("role", "", "backup set needs a role, a recovery strategy or a port")
		case op.Action == Add && h.Role != lb.RoleNone:
			return lb.Errorf("role", "", "the backup is already configured (%s %s %d): change it with highavailability backup set", h.Role, h.Recovery, h.Port)
		case op.Action == Set && h.Role == lb.RoleNone:
			return lb.Errorf("role", "", "no backup is configured: add it first (highavailability backup add)")
		}
		if roleOK {
			if h.Role, err = lb.ParseHARole(role); err != nil {
				return lb.Errorf("role", "", "%v", err)
			}
		}
		if recOK {
			if h.Recovery, err = lb.ParseHARecovery(rec); err != nil {
				return lb.Errorf("recovery", "", "%v", err)
			}
		}
		if portOK {
			h.Port = uint16(port)
		}
	case Remove:
		if h.Role == lb.RoleNone {
			return lb.Errorf("role", "", "no backup is configured")
		}
		h.Role, h.Recovery, h.Port = lb.RoleNone, lb.RecoveryAuto, 0
	default:
		return badAction(op)
	}
	d.cfg.HA = h
	return nil
}

// applyReach applies "reach add ADDR[+ADDR...]" and "reach remove
// ADDR[+ADDR...]".
func applyReach(d *draft, op *Op, _ *params) error {
	if op.Target == "" {
		return lb.Errorf("reach", "", "reach %s needs an address", op.Action)
	}
	var addrs []netip.Addr
	for _, s := range strings.Split(op.Target, "+") {
		a, err := parseAddr("reach", "", s)
		if err != nil {
			return err
		}
		if !a.IsValid() {
			return lb.Errorf("reach", "", "reach %s needs an address", op.Action)
		}
		addrs = append(addrs, a)
	}
	h := d.cfg.HA.Clone()
	switch op.Action {
	case Add:
		for _, a := range addrs {
			if slices.Contains(h.Reach, a) {
				return lb.Errorf("reach", a.String(), "already a reach target")
			}
			h.Reach = append(h.Reach, a)
		}
	case Remove:
		for _, a := range addrs {
			i := slices.Index(h.Reach, a)
			if i < 0 {
				return lb.Errorf("reach", a.String(), "is not a reach target")
			}
			h.Reach = slices.Delete(h.Reach, i, i+1)
		}
		if len(h.Reach) == 0 {
			h.Reach = nil
		}
	default:
		return badAction(op)
	}
	h.Sort()
	d.cfg.HA = h
	return nil
}

// haChecked reports whether a change needs the high-availability checks:
// the settings changed, or clusters or servers did while high
// availability is configured (primaryhost and return addresses follow
// the groups).
func haChecked(cfg lb.Config, ch Change) bool {
	return ch.HA || ch.Executor || (cfg.HA.Configured() && (len(ch.Clusters) > 0 || len(ch.Servers) > 0 || len(ch.Ports) > 0))
}

// checkHA checks the high-availability settings and how the clusters
// relate to them.
func checkHA(cfg lb.Config) error {
	h := cfg.HA
	for _, cl := range cfg.Clusters {
		if cl.PrimaryHost.IsValid() {
			if err := lb.CheckUnicast("primaryhost", cl.Address.String(), cl.PrimaryHost); err != nil {
				return err
			}
		}
	}
	if !h.Configured() {
		return nil
	}
	if len(h.Heartbeats) > lb.MaxHeartbeats {
		return lb.Errorf("heartbeat", haObject, "at most %d heartbeats", lb.MaxHeartbeats)
	}
	if len(h.Reach) > lb.MaxReach {
		return lb.Errorf("reach", haObject, "at most %d reach targets", lb.MaxReach)
	}
	for _, hb := range h.Heartbeats {
		obj := hb.Source.String() + "/" + hb.Destination.String()
		if err := lb.CheckUnicast("source", obj, hb.Source); err != nil {
			return err
		}
		if err := lb.CheckUnicast("destination", obj, hb.Destination); err != nil {
			return err
		}
		if hb.Source == hb.Destination {
			return lb.Errorf("destination", obj, "a heartbeat goes to the peer, not to this dispatcher")
		}
		if hb.Source.Is4() != hb.Destination.Is4() {
			return lb.Errorf("destination", obj, "source and destination must be of one family")
		}
		for _, a := range []netip.Addr{hb.Source, hb.Destination} {
			if _, ok := findCluster(cfg.Clusters, a); ok {
				return lb.Errorf("heartbeat", obj, "%s is a cluster address: heartbeats go between the dispatchers' own addresses", a)
			}
		}
		if slices.Contains(h.Destinations(), hb.Source) {
			return lb.Errorf("source", obj, "%s is also a heartbeat destination", hb.Source)
		}
	}
	for _, a := range h.Reach {
		if err := lb.CheckUnicast("reach", a.String(), a); err != nil {
			return err
		}
	}
	if h.Interval != 0 && (h.Interval < lb.MinHAInterval || h.Interval > lb.MaxHAInterval) {
		return lb.Errorf("interval", haObject, "%d is outside %d..%d ms", h.Interval, lb.MinHAInterval, lb.MaxHAInterval)
	}
	if h.Count != 0 && (h.Count < lb.MinHACount || h.Count > lb.MaxHACount) {
		return lb.Errorf("count", haObject, "%d is outside %d..%d", h.Count, lb.MinHACount, lb.MaxHACount)
	}
	if h.SecretFile != "" && !filepath.IsAbs(h.SecretFile) {
		return lb.Errorf("secretfile", haObject, "%q is not an absolute path", h.SecretFile)
	}
	if h.Enabled() && h.SecretFile == "" {
		return lb.Errorf("secretfile", haObject, "heartbeats are authenticated: give the shared secret's file (highavailability heartbeat add|set --secret-file F)")
	}
	if h.Role != lb.RoleNone && h.Port == 0 {
		return lb.Errorf("haport", haObject, "the backup needs a port")
	}
	if h.Role != lb.RoleBoth {
		return nil
	}
	// Mutual high availability: each cluster belongs to the dispatcher
	// its primaryhost names, and a return address to one group only.
	hosts := append(h.Sources(), h.Destinations()...)
	returns := map[netip.Addr]netip.Addr{} // return address → a cluster using it
	for i := range cfg.Clusters {
		cl := &cfg.Clusters[i]
		obj := cl.Address.String()
		if !cl.PrimaryHost.IsValid() {
			return lb.Errorf("primaryhost", obj, "under mutual high availability (role both) every cluster needs a primaryhost (cluster set %s --primaryhost ADDRESS)", cl.Address)
		}
		if len(h.Heartbeats) > 0 && !slices.Contains(hosts, cl.PrimaryHost) {
			return lb.Errorf("primaryhost", obj, "%s is neither a heartbeat source nor a destination", cl.PrimaryHost)
		}
		for _, p := range cl.Ports {
			if p.Method != lb.NAT {
				continue
			}
			for _, s := range p.Servers {
				if !s.ReturnAddress.IsValid() {
					continue
				}
				o, seen := returns[s.ReturnAddress]
				if !seen {
					returns[s.ReturnAddress] = cl.Address
					continue
				}
				if oc := cfg.Cluster(o); oc != nil && h.GroupOf(oc) != h.GroupOf(cl) {
					return lb.Errorf("returnaddress", lb.BackendKey{Service: lb.ServiceKey{Cluster: cl.Address, Port: p.Number}, Server: s.Address}.String(),
						"%s is also the return address of cluster %s, which another primaryhost serves", s.ReturnAddress, o)
				}
			}
		}
	}
	return nil
}

// haScript writes the "highavailability" lines of a saved configuration.
func haScript(sw *scriptWriter, h lb.HighAvailability) {
	if !h.Configured() {
		return
	}
	sw.printf("\n")
	if h.Role != lb.RoleNone {
		sw.printf("highavailability backup add %s %s %d\n", h.Role, h.Recovery, h.Port)
	}
	for i, hb := range h.Heartbeats {
		sw.printf("highavailability heartbeat add %s %s", hb.Source, hb.Destination)
		if i == 0 {
			if h.SecretFile != "" {
				sw.printf(" --secret-file %s", quote(h.SecretFile))
			}
			sw.printf(" --interval %d --count %d", h.IntervalMS(), h.DeadCount())
		}
		sw.printf("\n")
	}
	for _, a := range h.Reach {
		sw.printf("highavailability reach add %s\n", a)
	}
}

// HAAddressProblems names the addresses cfg's high availability uses
// that are not what they must be: a heartbeat address that is a NAT
// return address (it moves with the active dispatcher: after a takeover
// the heartbeats from it fail), a reach target that is a cluster or
// return address or one of this dispatcher's heartbeat sources (this
// host answers for it itself: it proves nothing about the network).
// Prepare refuses a change that brings a new one; a configuration
// loaded with one is warned of (the check came after it was accepted).
func HAAddressProblems(cfg lb.Config) []error {
	h := cfg.HA
	if !h.Configured() {
		return nil
	}
	returns := map[netip.Addr]bool{}
	for i := range cfg.Clusters {
		for _, p := range cfg.Clusters[i].Ports {
			for _, s := range p.Servers {
				if s.ReturnAddress.IsValid() {
					returns[s.ReturnAddress] = true
				}
			}
		}
	}
	var out []error
	for _, hb := range h.Heartbeats {
		for _, a := range []netip.Addr{hb.Source, hb.Destination} {
			if returns[a] {
				out = append(out, lb.Errorf("heartbeat", hb.Source.String()+"/"+hb.Destination.String(),
					"%s is a NAT return address, which moves with the active dispatcher: heartbeats go between the dispatchers' own addresses", a))
			}
		}
	}
	const outside = "a reach target is outside the pair (the router, a gateway): which dispatcher still reaches it tells which should serve"
	for _, a := range h.Reach {
		what := ""
		switch _, cluster := findCluster(cfg.Clusters, a); {
		case cluster:
			what = "a cluster address, which the active answers for itself"
		case returns[a]:
			what = "a NAT return address, which the active answers for itself"
		case slices.Contains(h.Sources(), a):
			what = "this dispatcher's own heartbeat source"
		default:
			continue
		}
		out = append(out, lb.Errorf("reach", haObject, "%s is %s: %s", a, what, outside))
	}
	return out
}

// newHAAddressProblem returns the first of next's HAAddressProblems that
// old did not have (nil: none).
func newHAAddressProblem(old, next lb.Config) error {
	had := map[string]bool{}
	for _, err := range HAAddressProblems(old) {
		had[err.Error()] = true
	}
	for _, err := range HAAddressProblems(next) {
		if !had[err.Error()] {
			return err
		}
	}
	return nil
}
