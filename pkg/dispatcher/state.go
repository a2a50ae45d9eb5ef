package dispatcher

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"

	"github.com/dlbproject/dlb/pkg/lb"
)

// StateFile is the name of the state file in the state directory.
const StateFile = "state.json"

const stateVersion = 1

// state is what the engine persists after every accepted change.
type state struct {
	Version int       `json:"version"`
	Config  lb.Config `json:"config"`
	IDs     ids       `json:"ids"`
	// Configured are the cluster addresses the engine put on interfaces.
	Configured map[netip.Addr]string `json:"configured,omitempty"`
	// AttachedMode is the XDP mode the executor was attached in (the
	// kernel does not report it for an adopted link).
	AttachedMode lb.XDPMode `json:"attached_mode"`
}

// ids are the executor ids of services and backends. They are persisted so
// that a restarted dlbd names the same objects in the pinned maps the same
// way. Freed ids are handed out again as late as possible (round robin), so
// that a connection entry left pointing at a removed backend is swept long
// before its id names another server.
type ids struct {
	Services    map[string]uint32 `json:"services"` // cluster@port -> id
	Backends    map[string]uint32 `json:"backends"` // cluster@port@server -> id
	NextService uint32            `json:"next_service"`
	NextBackend uint32            `json:"next_backend"`
}

func newIDs() ids {
	return ids{Services: map[string]uint32{}, Backends: map[string]uint32{}, NextService: 1, NextBackend: 1}
}

func (x ids) clone() ids {
	out := x
	out.Services = make(map[string]uint32, len(x.Services))
	for k, v := range x.Services {
		out.Services[k] = v
	}
	out.Backends = make(map[string]uint32, len(x.Backends))
	for k, v := range x.Backends {
		out.Backends[k] = v
	}
	return out
}

// assign gives every service and backend of cfg an id, keeping existing
// ones, and forgets ids of objects cfg no longer has.
func (x *ids) assign(cfg lb.Config, maxServices, maxBackends uint32) error {
	wantS := map[string]bool{}
	wantB := map[string]bool{}
	for _, cl := range cfg.Clusters {
		for _, p := range cl.Ports {
			sk := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}
			wantS[sk.String()] = true
			for _, s := range p.Servers {
				wantB[lb.BackendKey{Service: sk, Server: s.Address}.String()] = true
			}
		}
	}
	for k := range x.Services {
		if !wantS[k] {
			delete(x.Services, k)
		}
	}
	for k := range x.Backends {
		if !wantB[k] {
			delete(x.Backends, k)
		}
	}
	if err := allocate(x.Services, wantS, &x.NextService, maxServices, "port"); err != nil {
		return err
	}
	return allocate(x.Backends, wantB, &x.NextBackend, maxBackends, "server")
}

// allocate gives every wanted key without an id the next free id after
// *next, wrapping within [1, max).
func allocate(have map[string]uint32, want map[string]bool, next *uint32, max uint32, field string) error {
	used := make(map[uint32]bool, len(have))
	for _, id := range have {
		used[id] = true
	}
	for _, k := range sortedKeys(want) {
		if _, ok := have[k]; ok {
			continue
		}
		if uint32(len(used)) >= max-1 {
			return lb.Errorf(field, k, "the executor holds at most %d", max-1)
		}
		id := *next
		for used[id] || id == 0 || id >= max {
			id++
			if id >= max {
				id = 1
			}
		}
		have[k] = id
		used[id] = true
		*next = id + 1
		if *next >= max {
			*next = 1
		}
	}
	return nil
}

func loadState(dir string) (state, error) {
	st := state{Version: stateVersion, Config: lb.NewConfig(), IDs: newIDs()}
	path := filepath.Join(dir, StateFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("reading state: %w", err)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("reading state %s: %w", path, err)
	}
	if st.Version != stateVersion {
		return st, fmt.Errorf("reading state %s: version %d, this dlbd reads %d", path, st.Version, stateVersion)
	}
	if st.IDs.Services == nil {
		st.IDs.Services = map[string]uint32{}
	}
	if st.IDs.Backends == nil {
		st.IDs.Backends = map[string]uint32{}
	}
	st.Config.FillDefaults()
	st.Config.Sort()
	if err := st.Config.Validate(); err != nil {
		return st, fmt.Errorf("state %s is invalid: %w", path, err)
	}
	return st, nil
}

// saveState writes the state atomically: a crash leaves the old file or the
// new one, never a mix.
func saveState(dir string, st state) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating state directory: %w", err)
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding state: %w", err)
	}
	if err := renameio.WriteFile(filepath.Join(dir, StateFile), append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing state: %w", err)
	}
	return nil
}
