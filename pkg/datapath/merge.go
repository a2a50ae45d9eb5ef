//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/dlbproject/dlb/pkg/lb"
)

// Merging (high availability, a partition healed): the peer served a group
// while this executor served it too, and sends the connections it made
// meanwhile. They are written only where nothing this executor holds says
// otherwise: its own connections of the same time stay as they are.

// ctlExists is the result of a put or add that only writes new entries
// when the key has one.
const ctlExists = 3

// addConn writes a connection-table entry only if the flow has none; it
// reports whether it wrote it.
func (d *Datapath) addConn(k dispatcherFlowKey, f dispatcherFlow) (bool, error) {
	c := dispatcherConnCtl{Entry: dispatcherConnEntry{Key: k, Flow: f}, OnlyNew: 1}
	if err := runCtl(d.objs.DlbConnPut, &c); err != nil {
		return false, fmt.Errorf("adding a connection: %w", err)
	}
	return ctlAdded(c.Result, "adding a connection: no room could be made")
}

// addNAT writes a nat_flows (op ADD_FLOW) or nat_ports (ADD_PORT) entry
// only if its key has none; it reports whether it wrote it.
func (d *Datapath) addNAT(c *dispatcherNatCtl) (bool, error) {
	if err := d.natCtl(c); err != nil {
		return false, err
	}
	return ctlAdded(c.Result, "adding a NAT entry: the table is full")
}

// ctlAdded is an add's outcome: written, the key had an entry, or the
// error full (no room).
func ctlAdded(result uint32, full string) (bool, error) {
	switch result {
	case ctlDone:
		return true, nil
	case ctlExists:
		return false, nil
	}
	return false, errors.New(full)
}

// natPair names a NAT connection: its flow and its return port entries
// say the same of it.
type natPair struct {
	proto           uint8
	client, cluster netip.AddrPort
	nat             netip.AddrPort
}

// MergeConns implements the engine's ConnTables: it writes the entries no
// entry of this executor contradicts, as if the executor had written them
// their age ago: a connection or an affinity record where its key has
// none; a NAT connection (its flow and its return port, both of which
// must be in entries) where neither its flow nor its port has an entry
// that says otherwise. It returns how many entries it wrote.
func (d *Datapath) MergeConns(entries []lb.ConnEntry) (int, error) {
	w := d.connWriter()
	n := 0
	var errs []error
	fail := func(err error) bool {
		errs = append(errs, err)
		return len(errs) > 8
	}
	type halves struct{ flow, port *lb.ConnEntry }
	pairs := map[natPair]*halves{}
	var order []natPair
	for i := range entries {
		e := &entries[i]
		if !w.known(*e) {
			continue
		}
		switch e.Kind {
		case lb.ConnMAC:
			added, err := d.addConn(flowKeyOf(*e), w.flow(*e))
			if err != nil && fail(err) {
				return n, fmt.Errorf("merging the peer's entries: %w", errors.Join(errs...))
			}
			if added {
				n++
			}
		case lb.ConnAffinity:
			ak, r, ok := w.affinity(*e)
			if !ok {
				continue
			}
			err := d.objs.Affinity.Update(&ak, &r, ebpf.UpdateNoExist)
			switch {
			case err == nil:
				n++
			case errors.Is(err, ebpf.ErrKeyExist):
			case fail(fmt.Errorf("adding an affinity record: %w", err)):
				return n, fmt.Errorf("merging the peer's entries: %w", errors.Join(errs...))
			}
		case lb.ConnNATFlow, lb.ConnNATPort:
			k := natPair{e.Protocol, e.Client, e.Cluster, e.NAT}
			h := pairs[k]
			if h == nil {
				h = &halves{}
				pairs[k] = h
				order = append(order, k)
			}
			if e.Kind == lb.ConnNATFlow {
				h.flow = e
			} else {
				h.port = e
			}
		}
	}
	for _, k := range order {
		h := pairs[k]
		if h.flow == nil || h.port == nil {
			continue // half a connection: no use, and it would hold a port
		}
		added, err := d.mergeNAT(w, *h.flow, *h.port)
		if err != nil && fail(err) {
			break
		}
		n += added
	}
	if err := errors.Join(errs...); err != nil {
		return n, fmt.Errorf("merging the peer's entries: %w", err)
	}
	return n, nil
}

// mergeNAT writes a NAT connection's port and flow entries unless either
// key has an entry for another connection, and returns how many it
// wrote. The port goes first: a flow without its port would send the
// server packets whose replies reach another client.
func (d *Datapath) mergeNAT(w *connWriter, flow, port lb.ConnEntry) (int, error) {
	pk, pr := w.natPort(port)
	pc := dispatcherNatCtl{Op: uint32(dispatcherNatCtlOpNAT_CTL_ADD_PORT), P: dispatcherNatPortEntry{Key: pk, Rev: pr}}
	portAdded, err := d.addNAT(&pc)
	if err != nil {
		return 0, fmt.Errorf("adding a NAT port: %w", err)
	}
	if !portAdded {
		have, ok, err := d.getNATPort(pk)
		if err != nil {
			return 0, fmt.Errorf("reading a NAT port: %w", err)
		}
		if ok && (have.Client != pr.Client || have.ClientPort != pr.ClientPort || have.Vip != pr.Vip || have.VipPort != pr.VipPort) {
			return 0, nil // the port is another connection's
		}
	}
	fk, f := flowKeyOf(flow), w.natFlow(flow)
	fc := dispatcherNatCtl{Op: uint32(dispatcherNatCtlOpNAT_CTL_ADD_FLOW), F: dispatcherNatFlowEntry{Key: fk, Flow: f}}
	flowAdded, err := d.addNAT(&fc)
	if err == nil && !flowAdded {
		var have dispatcherNatFlow
		var ok bool
		have, ok, err = d.getNATFlow(fk)
		if err == nil && (!ok || have.NatAddr == f.NatAddr && have.NatPort == f.NatPort) {
			// The same connection (or gone since): the port stays.
			return b2i(portAdded), nil
		}
	}
	if flowAdded {
		return 1 + b2i(portAdded), nil
	}
	// The flow is another mapping's (or could not be written): the port
	// written for it goes.
	if portAdded {
		if _, derr := d.deleteNATPort(pk, pr.LastSeen); derr != nil {
			err = errors.Join(err, derr)
		}
	}
	if err != nil {
		return 0, fmt.Errorf("adding a NAT flow: %w", err)
	}
	return 0, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
