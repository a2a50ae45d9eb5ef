// Package store persists the dispatcher's state: the configuration, the
// executor ids of its objects, and the facts about the host the engine
// must remember (the addresses it put on interfaces, the XDP mode it
// attached in).
//
// The state lives in a directory as a snapshot (state.json) and a journal
// of the changes made since (journal.N). Every accepted change is one
// journal record holding only what changed — the new values of the
// objects touched, the ids given and freed — written and fsynced before
// the change is acknowledged, so a change costs what it touches however
// large the configuration. When the journal has grown, the store writes a
// new snapshot in the background (atomically, with renameio) and starts a
// new journal; opening the directory reads the snapshot and replays the
// journals that follow it. Records hold data, not operations, so a newer
// dlbd replays them without re-validating anything.
package store

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/google/renameio/v2"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/lb"
)

// StateFile is the name of the snapshot in the state directory.
const StateFile = "state.json"

// journalPrefix names the journals: journal.1, journal.2, ...
const journalPrefix = "journal."

// stateVersion is the snapshot format; version 1 (a dlbd before the
// journal) is read as a snapshot with no journal.
const stateVersion = 2

// compactAt is the journal size above which a new snapshot is written (at
// least; a larger snapshot allows a larger journal).
const compactAt = 4 << 20

// State is what the store keeps.
type State struct {
	// Config is the configuration.
	Config lb.Config
	// IDs are the executor ids of its ports and servers.
	IDs *IDs
	// Configured maps the addresses the engine put on interfaces to
	// the interface.
	Configured map[netip.Addr]string
	// Found are those of Configured that their interface had before the
	// engine wanted them there: the engine leaves them on.
	Found map[netip.Addr]string
	// AttachedMode is the XDP mode the executor was attached in (the
	// kernel does not report it for an adopted link).
	AttachedMode lb.XDPMode
	// HAStates are the high-availability states the engine last acted
	// on, per group: a restarted dlbd whose executor kept forwarding
	// resumes them.
	HAStates [lb.NumHAGroups]lb.HAState
	// Dropped says what Open left out: a journal's last record cut
	// short by a crash (it was never acknowledged). The engine logs it.
	Dropped []string
}

// snapshot is the state file's format.
type snapshot struct {
	Version int `json:"version"`
	// Journal is the first journal that follows the snapshot.
	Journal      int                         `json:"journal,omitempty"`
	Config       lb.Config                   `json:"config"`
	IDs          *IDs                        `json:"ids"`
	Configured   map[netip.Addr]string       `json:"configured,omitempty"`
	Found        map[netip.Addr]string       `json:"found,omitempty"`
	AttachedMode lb.XDPMode                  `json:"attached_mode"`
	HAStates     *[lb.NumHAGroups]lb.HAState `json:"ha_states,omitempty"`
}

// Record is one accepted change, as the journal keeps it: the new values
// of what changed.
type Record struct {
	Executor     *lb.Executor     `json:"executor,omitempty"`
	Manager      *lb.Manager      `json:"manager,omitempty"`
	MetricServer *lb.MetricServer `json:"metric_server,omitempty"`
	// HA is the high-availability configuration, when it changed.
	HA *lb.HighAvailability `json:"ha,omitempty"`
	// BGP is the BGP speaker's configuration, when it changed.
	BGP *lb.BGP `json:"bgp,omitempty"`
	// Advisors is the whole advisor list, when it changed.
	Advisors *[]lb.Advisor `json:"advisors,omitempty"`
	// Clusters, Ports and Servers are the objects added or changed (a
	// cluster without its ports, a port without its servers) and the keys
	// of those removed.
	Clusters     []lb.Cluster                `json:"clusters,omitempty"`
	Ports        []portRecord                `json:"ports,omitempty"`
	Servers      []serverRecord              `json:"servers,omitempty"`
	DelClusters  []netip.Addr                `json:"del_clusters,omitempty"`
	DelPorts     []lb.ServiceKey             `json:"del_ports,omitempty"`
	DelServers   []lb.BackendKey             `json:"del_servers,omitempty"`
	IDs          *IDDelta                    `json:"ids,omitempty"`
	Configured   *map[netip.Addr]string      `json:"configured,omitempty"`
	Found        *map[netip.Addr]string      `json:"found,omitempty"`
	AttachedMode *lb.XDPMode                 `json:"attached_mode,omitempty"`
	HAStates     *[lb.NumHAGroups]lb.HAState `json:"ha_states,omitempty"`
}

type portRecord struct {
	Cluster netip.Addr `json:"cluster"`
	lb.Port
}

type serverRecord struct {
	Service lb.ServiceKey `json:"service"`
	lb.Server
}

// NewRecord returns the record of a change from old to next (ch is
// config.Diff(old, next)) with the id delta d (nil: none).
func NewRecord(old, next lb.Config, ch config.Change, d *IDDelta) Record {
	var r Record
	if ch.Executor {
		r.Executor = &next.Executor
	}
	if ch.Manager {
		r.Manager = &next.Manager
	}
	if ch.MetricServer {
		r.MetricServer = &next.MetricServer
	}
	if ch.HA {
		h := next.HA.Clone()
		r.HA = &h
	}
	if ch.BGP {
		b := next.BGP.Clone()
		r.BGP = &b
	}
	if len(ch.Advisors) > 0 {
		a := slices.Clone(next.Advisors)
		r.Advisors = &a
	}
	for a, kind := range ch.Clusters {
		if kind == config.Removed {
			r.DelClusters = append(r.DelClusters, a)
			continue
		}
		if cl := next.Cluster(a); cl != nil {
			c := *cl
			c.Ports = nil
			r.Clusters = append(r.Clusters, c)
		}
	}
	for k, kind := range ch.Ports {
		if kind == config.Removed {
			r.DelPorts = append(r.DelPorts, k)
			continue
		}
		if p := next.Port(k); p != nil {
			x := *p
			x.Servers = nil
			r.Ports = append(r.Ports, portRecord{Cluster: k.Cluster, Port: x})
		}
	}
	for k, kind := range ch.Servers {
		if kind == config.Removed {
			r.DelServers = append(r.DelServers, k)
			continue
		}
		if p := next.Port(k.Service); p != nil {
			if s := p.Server(k.Server); s != nil {
				r.Servers = append(r.Servers, serverRecord{Service: k.Service, Server: *s})
			}
		}
	}
	if d != nil && !d.Empty() {
		r.IDs = d
	}
	return r
}

// Store is an open state directory.
type Store struct {
	dir     string
	journal *os.File
	n       int   // the number of the journal being written
	size    int64 // its size
	last    int64 // the size of the last snapshot written
	wg      sync.WaitGroup
	mu      sync.Mutex // guards busy, bgErr, snapped and from
	busy    bool
	bgErr   error
	// snapped: the snapshot file holds the state up to journal from
	// (read at Open or written since); journals from to n are what
	// follows it. Without a snapshot (none written yet, or the first
	// one failed), from is the first journal, which holds everything.
	snapped bool
	from    int
}

// Open reads the state in dir (creating dir when it does not exist): the
// snapshot and the journals after it. A state directory that does not
// hold a state yet gives the empty state. A journal whose last record was
// cut short by a crash (it was never acknowledged) loses that record; any
// other damage is an error naming the file and line.
func Open(dir string) (*Store, State, error) {
	st := State{Config: lb.NewConfig(), IDs: NewIDs(), Configured: map[netip.Addr]string{}, Found: map[netip.Addr]string{}}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, st, fmt.Errorf("creating state directory: %w", err)
	}
	s := &Store{dir: dir, n: 1}
	path := filepath.Join(dir, StateFile)
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, st, fmt.Errorf("reading state: %w", err)
	default:
		snap := snapshot{Config: lb.NewConfig(), IDs: NewIDs()}
		if err := json.Unmarshal(data, &snap); err != nil {
			return nil, st, fmt.Errorf("reading state %s: %w", path, err)
		}
		if snap.Version != 1 && snap.Version != stateVersion {
			return nil, st, fmt.Errorf("reading state %s: version %d, this dlbd reads 1 and %d", path, snap.Version, stateVersion)
		}
		if snap.IDs == nil {
			snap.IDs = NewIDs()
		}
		snap.IDs.index()
		st.Config, st.IDs, st.AttachedMode = snap.Config, snap.IDs, snap.AttachedMode
		if snap.HAStates != nil {
			st.HAStates = *snap.HAStates
		}
		for a, ifname := range snap.Configured {
			st.Configured[a] = ifname
		}
		for a, ifname := range snap.Found {
			st.Found[a] = ifname
		}
		s.n = max(snap.Journal, 1)
		s.last = int64(len(data))
		s.snapped = true
	}
	st.Config.FillDefaults()
	st.Config.Sort()

	journals, err := s.journals()
	if err != nil {
		return nil, st, err
	}
	s.from = s.n
	if !s.snapped && len(journals) > 0 {
		s.from = max(journals[0], 1)
	}
	for _, n := range journals {
		if n < s.n {
			// Written into the snapshot already; left by a crash
			// between the snapshot and the clean-up.
			_ = os.Remove(s.journalPath(n))
			continue
		}
		if err := s.replay(n, &st); err != nil {
			return nil, st, err
		}
		s.n = n
	}
	st.Config.Sort()
	if err := config.Validate(st.Config); err != nil {
		return nil, st, fmt.Errorf("state in %s is invalid: %w", dir, err)
	}
	f, err := os.OpenFile(s.journalPath(s.n), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, st, fmt.Errorf("opening journal: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, st, fmt.Errorf("opening journal: %w", err)
	}
	s.journal, s.size = f, fi.Size()
	return s, st, nil
}

func (s *Store) journalPath(n int) string {
	return filepath.Join(s.dir, journalPrefix+strconv.Itoa(n))
}

// journals lists the journal numbers in the directory, in order.
func (s *Store) journals() ([]int, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("reading state directory: %w", err)
	}
	var out []int
	for _, e := range ents {
		if n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), journalPrefix)); err == nil && strings.HasPrefix(e.Name(), journalPrefix) && n > 0 {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// replay applies journal n's records to st.
func (s *Store) replay(n int, st *State) error {
	path := s.journalPath(n)
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading journal: %w", err)
	}
	lines := bytes.Split(data, []byte{'\n'})
	for i, line := range lines {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var r Record
		if err := json.Unmarshal(line, &r); err != nil {
			if i == len(lines)-1 {
				// The last record, cut short by a crash before it was
				// acknowledged: drop it.
				if err := os.Truncate(path, int64(len(data)-len(line))); err != nil {
					return fmt.Errorf("dropping the torn last record of %s: %w", path, err)
				}
				st.Dropped = append(st.Dropped, fmt.Sprintf("the last record of %s (line %d, %d bytes) was cut short, as by a crash while it was written (before it was acknowledged): dropped", path, i+1, len(line)))
				break
			}
			return fmt.Errorf("reading journal %s line %d: %w", path, i+1, err)
		}
		apply(st, &r)
	}
	return nil
}

// apply applies a record to a state.
func apply(st *State, r *Record) {
	cfg := &st.Config
	if r.Executor != nil {
		cfg.Executor = *r.Executor
	}
	if r.Manager != nil {
		cfg.Manager = *r.Manager
	}
	if r.MetricServer != nil {
		cfg.MetricServer = *r.MetricServer
	}
	if r.HA != nil {
		cfg.HA = r.HA.Clone()
	}
	if r.BGP != nil {
		cfg.BGP = r.BGP.Clone()
	}
	if r.Advisors != nil {
		cfg.Advisors = slices.Clone(*r.Advisors)
	}
	for _, k := range r.DelServers {
		if p := cfg.Port(k.Service); p != nil {
			p.Servers = slices.DeleteFunc(p.Servers, func(s lb.Server) bool { return s.Address == k.Server })
		}
	}
	for _, k := range r.DelPorts {
		if cl := cfg.Cluster(k.Cluster); cl != nil {
			cl.Ports = slices.DeleteFunc(cl.Ports, func(p lb.Port) bool { return p.Number == k.Port })
		}
	}
	cfg.Clusters = slices.DeleteFunc(cfg.Clusters, func(c lb.Cluster) bool { return slices.Contains(r.DelClusters, c.Address) })
	for _, c := range r.Clusters {
		if cl := cfg.Cluster(c.Address); cl != nil {
			ports := cl.Ports
			*cl = c
			cl.Ports = ports
			continue
		}
		i, _ := slices.BinarySearchFunc(cfg.Clusters, c.Address, func(x lb.Cluster, a netip.Addr) int { return x.Address.Compare(a) })
		cfg.Clusters = slices.Insert(cfg.Clusters, i, c)
	}
	for _, p := range r.Ports {
		cl := cfg.Cluster(p.Cluster)
		if cl == nil {
			continue
		}
		if cur := cl.Port(p.Number); cur != nil {
			servers := cur.Servers
			*cur = p.Port
			cur.Servers = servers
			continue
		}
		i, _ := slices.BinarySearchFunc(cl.Ports, p.Number, func(x lb.Port, n uint16) int { return int(x.Number) - int(n) })
		cl.Ports = slices.Insert(cl.Ports, i, p.Port)
	}
	for _, s := range r.Servers {
		p := cfg.Port(s.Service)
		if p == nil {
			continue
		}
		if cur := p.Server(s.Address); cur != nil {
			*cur = s.Server
			continue
		}
		i, _ := slices.BinarySearchFunc(p.Servers, s.Address, func(x lb.Server, a netip.Addr) int { return x.Address.Compare(a) })
		p.Servers = slices.Insert(p.Servers, i, s.Server)
	}
	if r.IDs != nil {
		st.IDs.replay(r.IDs)
	}
	if r.Configured != nil {
		st.Configured = map[netip.Addr]string{}
		for a, ifname := range *r.Configured {
			st.Configured[a] = ifname
		}
	}
	if r.Found != nil {
		st.Found = map[netip.Addr]string{}
		for a, ifname := range *r.Found {
			st.Found[a] = ifname
		}
	}
	if r.AttachedMode != nil {
		st.AttachedMode = *r.AttachedMode
	}
	if r.HAStates != nil {
		st.HAStates = *r.HAStates
	}
}

// Append writes a record to the journal and makes it durable (fsync)
// before it returns: once it returned nil, the change survives a crash.
func (s *Store) Append(r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding journal record: %w", err)
	}
	b = append(b, '\n')
	n, err := s.journal.Write(b)
	if err == nil {
		err = s.journal.Sync()
	}
	if err != nil {
		// Cut off whatever part of the record was written, so that the
		// journal ends at the last acknowledged record.
		if terr := s.journal.Truncate(s.size); terr != nil {
			return fmt.Errorf("writing journal: %w (and removing the partial record: %v)", err, terr)
		}
		return fmt.Errorf("writing journal: %w", err)
	}
	s.size += int64(n)
	return nil
}

// Reserve makes room in the journal for r and extra bytes more (what the
// record will gain before it is appended), so that appending it cannot
// fail for want of space: a change is refused before it touches the
// executor or the host, instead of being taken back after (which an
// executor stop cannot be without losing its tables). The blocks stay the
// journal's, for the records that follow.
func (s *Store) Reserve(r Record, extra int) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding journal record: %w", err)
	}
	if err := preallocate(s.journal, s.size, int64(len(b)+1+extra)); err != nil {
		return fmt.Errorf("making room in the journal %s: %w", s.journal.Name(), err)
	}
	return nil
}

// NeedsSnapshot reports whether the journal has grown enough that a new
// snapshot should be written.
func (s *Store) NeedsSnapshot() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.busy && s.size > max(compactAt, s.last)
}

// Snapshot starts writing st as the new snapshot in the background and
// moves on to a new journal; st must be the state after the last record
// appended, and must not change afterwards (the configuration's slices
// are never written after a change is committed; the ids and the
// configured addresses must be copies). A failure is reported by the next
// Snapshot or by Close; the journal then simply keeps growing.
func (s *Store) Snapshot(st State) error {
	s.mu.Lock()
	if s.busy {
		s.mu.Unlock()
		return nil
	}
	s.busy = true
	err := s.bgErr
	s.bgErr = nil
	s.mu.Unlock()

	old := s.n
	f, ferr := os.OpenFile(s.journalPath(old+1), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if ferr != nil {
		s.mu.Lock()
		s.busy = false
		s.mu.Unlock()
		return errors.Join(err, fmt.Errorf("starting a new journal: %w", ferr))
	}
	_ = s.journal.Close()
	s.journal, s.n, s.size = f, old+1, 0
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		size, werr := s.writeSnapshot(st, old+1)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.busy = false
		if werr != nil {
			s.bgErr = werr
			return
		}
		s.last, s.snapped, s.from = size, true, old+1
		for n := 1; n <= old; n++ {
			_ = os.Remove(s.journalPath(n))
		}
	}()
	return err
}

// writeSnapshot writes the snapshot file atomically.
func (s *Store) writeSnapshot(st State, journal int) (int64, error) {
	snap := snapshot{Version: stateVersion, Journal: journal, Config: st.Config, IDs: st.IDs,
		Configured: st.Configured, Found: st.Found, AttachedMode: st.AttachedMode, HAStates: &st.HAStates}
	pf, err := renameio.NewPendingFile(filepath.Join(s.dir, StateFile), renameio.WithPermissions(0o600))
	if err != nil {
		return 0, fmt.Errorf("writing state snapshot: %w", err)
	}
	defer func() { _ = pf.Cleanup() }() // removes the temporary file unless it replaced the snapshot
	w := bufio.NewWriterSize(pf, 1<<20)
	cw := &countWriter{w: w}
	if err := json.NewEncoder(cw).Encode(snap); err != nil {
		return 0, fmt.Errorf("writing state snapshot: %w", err)
	}
	if err := w.Flush(); err != nil {
		return 0, fmt.Errorf("writing state snapshot: %w", err)
	}
	if err := pf.CloseAtomicallyReplace(); err != nil {
		return 0, fmt.Errorf("writing state snapshot: %w", err)
	}
	if d, err := os.Open(s.dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return cw.n, nil
}

type countWriter struct {
	w *bufio.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Lost reports whether the state directory no longer holds what the
// store wrote: the journal being written is not the file at its path (it
// was deleted, or the directory with it), or the snapshot or a journal it
// follows is gone. What is appended then would be read by no one: the
// engine writes the whole state again (Rewrite). A snapshot that failed
// (a full disk) loses nothing: the journals before it are kept, and
// their being there is what is checked.
func (s *Store) Lost() bool {
	s.mu.Lock()
	busy, snapped, from := s.busy, s.snapped, s.from
	s.mu.Unlock()
	if busy {
		// A snapshot being written: the journal's predecessors go
		// when it is in place; asked again later.
		return false
	}
	at, err := os.Stat(s.journalPath(s.n))
	if err != nil {
		return true
	}
	open, err := s.journal.Stat()
	if err != nil || !os.SameFile(at, open) {
		return true
	}
	if snapped {
		if _, err := os.Stat(filepath.Join(s.dir, StateFile)); err != nil {
			return true
		}
	}
	for n := from; n < s.n; n++ {
		if _, err := os.Stat(s.journalPath(n)); err != nil {
			return true
		}
	}
	return false
}

// Rewrite writes st, the whole state, as a new snapshot followed by a new,
// empty journal, creating the directory again if it is gone, and waits
// until it is durable; st must be the state after the last record
// appended. It is how the store recovers when Lost. The old journal's
// file is closed (it was read by no one).
func (s *Store) Rewrite(st State) error {
	s.wg.Wait() // no snapshot being written
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("creating state directory again: %w", err)
	}
	next := s.n + 1
	f, err := os.OpenFile(s.journalPath(next), os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("starting a new journal: %w", err)
	}
	size, err := s.writeSnapshot(st, next)
	if err != nil {
		_ = f.Close()
		_ = os.Remove(s.journalPath(next))
		return err
	}
	_ = s.journal.Close()
	s.mu.Lock()
	s.journal, s.n, s.size, s.last, s.bgErr = f, next, 0, size, nil
	s.snapped, s.from = true, next
	s.mu.Unlock()
	// Journals the snapshot holds, if any are left.
	if ns, err := s.journals(); err == nil {
		for _, n := range ns {
			if n < next {
				_ = os.Remove(s.journalPath(n))
			}
		}
	}
	return nil
}

// Close waits for a snapshot being written and closes the journal.
func (s *Store) Close() error {
	s.wg.Wait()
	err := s.journal.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.bgErr, err)
}
