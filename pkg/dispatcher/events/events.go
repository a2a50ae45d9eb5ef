// Package events runs the operator's event scripts, IBM style: when a
// server goes down or up, when a port has no server left (managerAlert)
// or has one again, when half-open connections pass maxhalfopen, when the
// executor loses its interface or attaches to it again or replaces an
// older version's, dlbd runs
// the executable named after the event in the scripts directory, with the
// event in its environment. Scripts run one at a time on their own
// goroutine, each bounded by a timeout (package runner), so that they
// never delay the engine; when too many wait, new events are dropped and
// logged. The high-availability and executor events have a goroutine of
// their own: a takeover's goActive does not wait behind a burst of
// managerAlert scripts (a router lost behind a thousand ports).
//
// A variable longer than MaxInEnvironment (DLB_HA_CLUSTERS of a group of
// thousands of clusters) cannot be put in a script's environment: Linux
// refuses to run a program given a string of 128 KiB or more (E2BIG).
// Its script gets NAME_FILE instead of NAME, the path of a file holding
// the value, removed when the script ends.
package events

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlbproject/dlb/pkg/runner"
)

// Events, named as IBM's.
const (
	ServerDown    = "serverDown"
	ServerUp      = "serverUp"
	ManagerAlert  = "managerAlert"
	ManagerClear  = "managerClear"
	HalfOpenAlert = "halfOpenAlert"
	HalfOpenDone  = "halfOpenAlertDone"
	// ExecutorDetached: the executor's interface is gone (DLB_INTERFACE,
	// DLB_REASON); ExecutorAttached: an interface of its name appeared
	// and the executor is attached to it again (DLB_INTERFACE,
	// DLB_IFINDEX). dlb's own, beside IBM's.
	ExecutorDetached = "executorDetached"
	ExecutorAttached = "executorAttached"
	// ExecutorReplaced: dlbd put its executor in the place of one a dlbd
	// of another version had pinned, whose tables it could not adopt
	// (DLB_INTERFACE, DLB_REASON): NAT connections and affinity records
	// were lost. dlb's own.
	ExecutorReplaced = "executorReplaced"
	// High availability: this dispatcher serves a group of clusters
	// (goActive), stands by for it (goStandby), or cannot forward
	// (goInOp: its executor is stopped, detached or its interface
	// down); highavailChange follows every change of state, of the
	// peer's liveness, of a conflict of roles or of configuration
	// digests.
	GoActive        = "goActive"
	GoStandby       = "goStandby"
	GoInOp          = "goInOp"
	HighAvailChange = "highavailChange"
)

// maxQueued bounds the events waiting for a script, in each lane.
const maxQueued = 256

// dropLogEvery bounds the warnings about dropped events: one for the
// first drop, then at most one per interval, with the count since.
const dropLogEvery = 10 * time.Second

// urgent are the events whose scripts run in a lane of their own (see the
// package comment), in the order raised.
var urgent = map[string]bool{GoActive: true, GoStandby: true, GoInOp: true, HighAvailChange: true,
	ExecutorDetached: true, ExecutorAttached: true, ExecutorReplaced: true}

// MaxInEnvironment is the longest value a script gets in its environment;
// a longer one is in the file NAME_FILE names. Linux's bound is 128 KiB
// for a string, and a quarter of the stack limit for all of them.
const MaxInEnvironment = 64 << 10

// RecentEvents is how many of the latest events a Runner remembers for
// Recent.
const RecentEvents = 100

// Record is an event as it was raised: its name, when, and its variables
// (DLB_SERVER, DLB_PORT, ...; do not change them).
type Record struct {
	Name string
	At   time.Time
	Env  map[string]string
}

type event struct {
	name string
	env  map[string]string
	at   time.Time
}

// Runner runs event scripts.
type Runner struct {
	dir        string
	timeout    time.Duration
	log        *slog.Logger
	urgentLane chan event // the urgent events' queue
	otherLane  chan event // the rest's

	mu     sync.Mutex
	counts map[string]uint64
	recent []Record // a ring of RecentEvents, next at next%RecentEvents
	next   int
	// dropped counts the events dropped since the last warning about
	// them, at warned.
	dropped int
	warned  time.Time
	// droppedTotal counts every event whose script was dropped.
	droppedTotal uint64
}

// New returns a runner of the scripts in dir (empty: none), each killed
// after timeout.
func New(dir string, timeout time.Duration, log *slog.Logger) *Runner {
	return &Runner{dir: dir, timeout: timeout, log: log, urgentLane: make(chan event, maxQueued), otherLane: make(chan event, maxQueued),
		counts: map[string]uint64{}}
}

// maxLogged bounds the length of a variable's value as logged: a pair's
// 4,000 clusters made each of its events' lines 60 KB long (longer than
// journald keeps in one entry). Scripts and the recent events have it
// whole.
const maxLogged = 512

// logged is v as logged: cut after the last word that ends within
// maxLogged bytes, the rest counted.
func logged(v string) string {
	if len(v) <= maxLogged {
		return v
	}
	cut := strings.LastIndexByte(v[:maxLogged+1], ' ')
	if cut <= 0 {
		cut = maxLogged
	}
	return fmt.Sprintf("%s … (%d bytes in all)", v[:cut], len(v))
}

// Emit logs an event, counts it, remembers it among the recent ones, and
// queues its script, if the scripts directory is set. It never blocks.
func (r *Runner) Emit(name string, env map[string]string) {
	attrs := make([]any, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		attrs = append(attrs, slog.String(k, logged(env[k])))
	}
	// A group, not the map: the text log reads env.DLB_PORT=80, not
	// env="map[DLB_PORT:80]".
	r.log.Info("event", "event", name, slog.Group("env", attrs...))
	now := time.Now()
	r.mu.Lock()
	r.counts[name]++
	rec := Record{Name: name, At: now, Env: env}
	if len(r.recent) < RecentEvents {
		r.recent = append(r.recent, rec)
	} else {
		r.recent[r.next%RecentEvents] = rec
	}
	r.next++
	r.mu.Unlock()
	if r.dir == "" {
		return
	}
	lane := r.otherLane
	if urgent[name] {
		lane = r.urgentLane
	}
	select {
	case lane <- event{name: name, env: env, at: now}:
	default:
		r.drop(name, now)
	}
}

// drop counts an event dropped for want of room, and logs the first of a
// burst and then at most one warning per dropLogEvery.
func (r *Runner) drop(name string, now time.Time) {
	r.mu.Lock()
	r.dropped++
	r.droppedTotal++
	n := r.dropped
	if !r.warned.IsZero() && now.Sub(r.warned) < dropLogEvery {
		r.mu.Unlock()
		return
	}
	r.dropped, r.warned = 0, now
	r.mu.Unlock()
	r.log.Warn("events dropped: too many waiting for their scripts (dlb_event_scripts_dropped_total counts them all)",
		"event", name, "dropped", n, "queued", maxQueued)
}

// Counts returns how many events of each name were raised.
func (r *Runner) Counts() map[string]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.counts)
}

// Dropped returns how many events' scripts were not run because too many
// were waiting (their events are counted and remembered all the same).
func (r *Runner) Dropped() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.droppedTotal
}

// Recent returns the latest events (at most RecentEvents), oldest first.
func (r *Runner) Recent() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.recent) < RecentEvents {
		return slices.Clone(r.recent)
	}
	i := r.next % RecentEvents
	return append(slices.Clone(r.recent[i:]), r.recent[:i]...)
}

// Run runs queued events' scripts until ctx ends: each lane's one at a
// time, in the order raised.
func (r *Runner) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, lane := range []chan event{r.urgentLane, r.otherLane} {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case ev := <-lane:
					r.run(ctx, ev)
				}
			}
		})
	}
	wg.Wait()
}

// run runs the event's script with the event in its environment
// (DLB_EVENT, DLB_TIME and the event's own variables).
func (r *Runner) run(ctx context.Context, ev event) {
	path := filepath.Join(r.dir, ev.name)
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
		r.log.Warn("event script is not an executable file", "script", path, "err", err)
		return
	}
	env := append(os.Environ(), "DLB_EVENT="+ev.name, "DLB_TIME="+ev.at.UTC().Format(time.RFC3339))
	var files []string
	defer func() {
		for _, f := range files {
			if err := os.Remove(f); err != nil {
				r.log.Warn("removing an event script's variable file", "file", f, "err", err)
			}
		}
	}()
	for _, k := range slices.Sorted(maps.Keys(ev.env)) {
		v := ev.env[k]
		if len(v) <= MaxInEnvironment {
			env = append(env, k+"="+v)
			continue
		}
		f, err := valueFile(ev.name, k, v)
		if err != nil {
			r.log.Warn("event script runs without a variable too long for its environment", "script", path, "variable", k, "err", err)
			continue
		}
		files = append(files, f)
		env = append(env, k+"_FILE="+f)
	}
	res := runner.Run(ctx, runner.Cmd{Path: path, Env: env, Timeout: r.timeout})
	out := string(res.Stdout) + string(res.Stderr)
	switch {
	case res.TimedOut:
		r.log.Warn("event script killed after its timeout", "script", path, "timeout", r.timeout)
	case res.Err != nil:
		r.log.Warn("event script failed", "script", path, "err", res.Err, "output", out)
	default:
		r.log.Info("event script ran", "script", path, "output", out)
	}
}

// valueFile writes the value of an event's variable into a new file of
// the temporary directory (readable by its owner only) and returns its
// path.
func valueFile(event, name, value string) (string, error) {
	f, err := os.CreateTemp("", "dlb-"+event+"-"+name+"-*")
	if err != nil {
		return "", fmt.Errorf("creating the file of %s: %w", name, err)
	}
	_, err = f.WriteString(value + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return "", fmt.Errorf("writing the file of %s: %w", name, err)
	}
	return f.Name(), nil
}
