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
// meanwhile. Where this executor has an entry for the same key, the one
// used last wins, but a closing entry gives way to one that is not
// (holds): this executor's connections of the same time stay as they are,
// and its entries of connections that ended or went quiet meanwhile (a
// client port used again makes the same flow key) give way.

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

// holds reports whether this executor's entry (its state and last use)
// stands against the peer's for the same key: unless it is closing (a FIN
// or RST seen: a connection ended, whose entry a client port used again
// would still find, and keep fresh) and the peer's is not, the one used
// last.
func holds(state uint8, seen uint64, peerState uint8, peerSeen uint64) bool {
	return !revives(state, peerState) && seen >= peerSeen
}

// revives reports whether an entry of this executor's is closing and the
// peer's for the same key is not. Saying the same otherwise (a reused
// client port given the same server and return port), it is still
// written over: closing, it would be removed fintimeout after its last
// use, however live the connection.
func revives(state, peerState uint8) bool {
	closing := uint8(dispatcherFlowStateFLOW_CLOSING)
	return state == closing && peerState != closing
}

// mergeConn writes a connection-table entry where the flow has none, one
// to another server used less lately than f, or one closing where f is
// not (revives); it reports whether it wrote it.
func (d *Datapath) mergeConn(k dispatcherFlowKey, f dispatcherFlow) (bool, error) {
	added, err := d.addConn(k, f)
	if err != nil || added {
		return added, err
	}
	have, ok, err := d.getConn(k)
	if err != nil || ok && (have.Backend == f.Backend && !revives(have.State, f.State) || holds(have.State, have.LastSeen, f.State, f.LastSeen)) {
		return false, err
	}
	return true, d.putConn(k, f)
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

// MergeConns implements the engine's ConnTables: it writes the entries
// that no entry of this executor used since contradicts, as if the
// executor had written them their age ago: a connection where its flow
// has none or an older one; an affinity record where its key has none; a
// NAT connection (its flow and its return port, both of which must be in
// entries) where neither its flow nor its port has an entry of another
// connection's used since (mergeNAT). It returns how many entries it
// wrote.
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
			written, err := d.mergeConn(flowKeyOf(*e), w.flow(*e))
			if err != nil && fail(err) {
				return n, fmt.Errorf("merging the peer's entries: %w", errors.Join(errs...))
			}
			if written {
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

// mergeNAT writes a NAT connection's return port and flow entries, and
// returns how many it wrote. Where this executor has an entry for either
// key that says otherwise, the one used last wins (holds): an older one is a
// connection that ended or went quiet while the peer served (a client
// port used again makes the same flow key, and the same client may have
// been given the same return port); its other half goes with it, so that
// no flow translates to a port whose replies go to another client. The
// port goes first: a flow without its port would send the server packets
// whose replies reach another client.
func (d *Datapath) mergeNAT(w *connWriter, flow, port lb.ConnEntry) (int, error) {
	pk, pr := w.natPort(port)
	fk, f := flowKeyOf(flow), w.natFlow(flow)
	written := 0
	pc := dispatcherNatCtl{Op: uint32(dispatcherNatCtlOpNAT_CTL_ADD_PORT), P: dispatcherNatPortEntry{Key: pk, Rev: pr}}
	portWritten, err := d.addNAT(&pc)
	if err != nil {
		return 0, fmt.Errorf("adding a NAT port: %w", err)
	}
	if !portWritten {
		have, ok, err := d.getNATPort(pk)
		if err != nil {
			return 0, fmt.Errorf("reading a NAT port: %w", err)
		}
		same := revOwner(pk, have) == fk
		switch {
		case !ok, same && !revives(have.State, pr.State):
			// The same connection's (or gone since).
		case !same && holds(have.State, have.LastSeen, pr.State, pr.LastSeen):
			return 0, nil // another connection's, used since
		default:
			if err := d.putNATPort(pk, pr); err != nil {
				return 0, fmt.Errorf("writing a NAT port: %w", err)
			}
			portWritten = true
			if !same {
				if err := d.dropNATFlowOf(have, pk); err != nil {
					return 1, err
				}
			}
		}
	}
	if portWritten {
		written++
	}
	fc := dispatcherNatCtl{Op: uint32(dispatcherNatCtlOpNAT_CTL_ADD_FLOW), F: dispatcherNatFlowEntry{Key: fk, Flow: f}}
	flowAdded, err := d.addNAT(&fc)
	if err == nil && flowAdded {
		return written + 1, nil
	}
	if err == nil {
		var have dispatcherNatFlow
		var ok bool
		if have, ok, err = d.getNATFlow(fk); err == nil {
			same := have.NatAddr == f.NatAddr && have.NatPort == f.NatPort
			switch {
			case !ok, same && !revives(have.State, f.State):
				return written, nil // the same connection's (or gone since)
			case same, !holds(have.State, have.LastSeen, f.State, f.LastSeen):
				// The same mapping closing, or an older mapping of the
				// flow key: replaced, and the port an older one held
				// let go.
				if err = d.putNATFlow(fk, f); err == nil {
					if !same {
						err = d.dropNATPortOf(have, fk)
					}
					return written + 1, err
				}
			}
		}
	}
	// The flow is another mapping's, used since (or could not be
	// written): the port written for it goes.
	if portWritten {
		if _, derr := d.deleteNATPort(pk, pr.LastSeen); derr != nil {
			err = errors.Join(err, derr)
		}
	}
	if err != nil {
		return 0, fmt.Errorf("adding a NAT flow: %w", err)
	}
	return 0, nil
}

// dropNATFlowOf removes the flow of the connection a return port was
// taken from, if it still translates to that port.
func (d *Datapath) dropNATFlowOf(old dispatcherNatRev, pk dispatcherNatKey) error {
	fk := revOwner(pk, old)
	f, ok, err := d.getNATFlow(fk)
	if err != nil || !ok || f.NatAddr != pk.Addr || f.NatPort != pk.Port {
		return err
	}
	if _, err := d.deleteNATFlow(fk, f.LastSeen); err != nil {
		return fmt.Errorf("removing a NAT flow: %w", err)
	}
	return nil
}

// dropNATPortOf removes the return port an older mapping of flow key fk
// held, if it still replies to that flow.
func (d *Datapath) dropNATPortOf(old dispatcherNatFlow, fk dispatcherFlowKey) error {
	pk := dispatcherNatKey{Port: old.NatPort, Proto: fk.Proto, Family: fk.Family}
	pk.Addr = old.NatAddr
	r, ok, err := d.getNATPort(pk)
	if err != nil || !ok || revOwner(pk, r) != fk {
		return err
	}
	if _, err := d.deleteNATPort(pk, r.LastSeen); err != nil {
		return fmt.Errorf("removing a NAT port: %w", err)
	}
	return nil
}
