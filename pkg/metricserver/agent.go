package metricserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/procfs"
)

const (
	// DefaultSampleInterval is how often the agent samples /proc/stat for
	// the CPU load.
	DefaultSampleInterval = time.Second
	// MaxScripts is the most metric scripts an agent runs; further files
	// in the scripts directory are ignored (in name order), which keeps a
	// report well under MaxReportSize.
	MaxScripts = 100
	// collectCache is how long a collection serves further requests: it
	// bounds how often scripts run however often the agent is asked.
	collectCache = 500 * time.Millisecond
)

// AgentOptions configures an Agent.
type AgentOptions struct {
	// Secret is the shared secret that signs reports (see LoadSecret).
	// Required, at least MinSecretLen bytes.
	Secret []byte
	// Name is the agent name put in reports; empty means the host name.
	Name string
	// ProcRoot is where the proc file system is mounted; empty means
	// /proc. Tests point it at fixtures; in a container it may be the
	// host's /proc mounted elsewhere.
	ProcRoot string
	// ScriptsDir holds operator metric scripts (see the package
	// documentation); empty means none.
	ScriptsDir string
	// ScriptTimeout is how long one script may run; zero means
	// DefaultScriptTimeout.
	ScriptTimeout time.Duration
	// SampleInterval is the CPU sampling period; zero means
	// DefaultSampleInterval.
	SampleInterval time.Duration
	// Logger receives the agent's logs; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Agent is the Metric Server agent of one backend. It collects the
// built-in metrics and runs the scripts, and answers report requests as an
// http.Handler. Run must be running for the CPU load to be available.
type Agent struct {
	secret        []byte
	name          string
	fs            procfs.FS
	scriptsDir    string
	scriptTimeout time.Duration
	interval      time.Duration
	log           *slog.Logger
	now           func() time.Time
	cpu           *cpuSampler
	cacheFor      time.Duration

	collectMu   sync.Mutex
	snap        Report            // latest collection; Nonce and Seq unset
	lastMissing map[string]string // reasons of the previous collection, for logging changes
	lastDirErr  string

	seqMu   sync.Mutex
	lastSeq uint64
}

// NewAgent checks the options and returns an agent.
func NewAgent(o AgentOptions) (*Agent, error) {
	if len(o.Secret) < MinSecretLen {
		return nil, fmt.Errorf("creating agent: secret is %d bytes, shorter than %d", len(o.Secret), MinSecretLen)
	}
	if o.ScriptTimeout < 0 || o.SampleInterval < 0 {
		return nil, errors.New("creating agent: negative script timeout or sample interval")
	}
	a := &Agent{
		secret:        append([]byte(nil), o.Secret...),
		name:          o.Name,
		scriptsDir:    o.ScriptsDir,
		scriptTimeout: o.ScriptTimeout,
		interval:      o.SampleInterval,
		log:           o.Logger,
		now:           o.Now,
		cacheFor:      collectCache,
	}
	if a.name == "" {
		a.name, _ = os.Hostname()
	}
	if a.scriptTimeout == 0 {
		a.scriptTimeout = DefaultScriptTimeout
	}
	if a.interval == 0 {
		a.interval = DefaultSampleInterval
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.now == nil {
		a.now = time.Now
	}
	root := o.ProcRoot
	if root == "" {
		root = procfs.DefaultMountPoint
	}
	fs, err := procfs.NewFS(root)
	if err != nil {
		return nil, fmt.Errorf("opening proc file system: %w", err)
	}
	a.fs = fs
	a.cpu = newCPUSampler(fs)
	return a, nil
}

// Run samples the CPU counters every SampleInterval until ctx is done.
// Without it cpuload is reported missing.
func (a *Agent) Run(ctx context.Context) {
	a.cpu.run(ctx, a.interval, a.now)
}

// ServeHTTP answers GET (or HEAD) ReportPath?nonce=N with a signed report;
// see the package documentation. Other paths get 404, other methods 405, a
// missing or malformed nonce 400; none of those answers is signed.
func (a *Agent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != ReportPath {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	nonces := r.URL.Query()[NonceParam]
	if len(nonces) != 1 || !validNonce(nonces[0]) {
		http.Error(w, fmt.Sprintf("need exactly one %s parameter of %d to %d characters of A-Z a-z 0-9 - _",
			NonceParam, MinNonceLen, MaxNonceLen), http.StatusBadRequest)
		return
	}
	// Scripts are not cut short by a client that goes away: the result
	// serves the next requests too.
	rep := a.Collect(context.WithoutCancel(r.Context()))
	rep.Nonce = nonces[0]
	rep.Seq = a.nextSeq()
	body, err := json.Marshal(rep)
	if err != nil {
		a.log.Error("encoding report", "err", err)
		http.Error(w, "encoding report failed", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set(SignatureHeader, Sign(a.secret, body))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
	a.log.Debug("report served", "remote", r.RemoteAddr, "seq", rep.Seq, "metrics", len(rep.Metrics), "missing", len(rep.Missing))
}

// nextSeq returns the next sequence number: the larger of the previous one
// plus one and the wall clock in microseconds since the Unix epoch. Seeding
// from the clock keeps the sequence increasing across restarts of the
// agent, unless its clock steps back.
func (a *Agent) nextSeq() uint64 {
	a.seqMu.Lock()
	defer a.seqMu.Unlock()
	seq := a.lastSeq + 1
	if us := a.now().UnixMicro(); us > 0 && uint64(us) > seq {
		seq = uint64(us)
	}
	a.lastSeq = seq
	return seq
}

// Collect returns the current figures as an unsigned report (no nonce, no
// sequence number): the built-in metrics, then the scripts, a script
// replacing a built-in of the same name. Figures are clamped to [0, 100];
// a metric that cannot be collected is listed in Missing with the reason.
// A collection younger than half a second is reused, so scripts run at
// most twice a second however often the agent is asked; concurrent calls
// wait for the collection in progress.
func (a *Agent) Collect(ctx context.Context) Report {
	a.collectMu.Lock()
	defer a.collectMu.Unlock()
	if a.snap.TimestampMS != 0 {
		if age := a.snap.Age(a.now()); age >= 0 && age < a.cacheFor {
			return a.snap
		}
	}
	metrics := map[string]float64{}
	missing := map[string]string{}
	set := func(name string, v float64, err error) {
		delete(metrics, name)
		delete(missing, name)
		if err == nil {
			var ok bool
			if v, ok = clamp(v); !ok {
				err = errors.New("not a finite number")
			}
		}
		if err != nil {
			missing[name] = cut(err.Error(), MaxMissingReason)
			return
		}
		metrics[name] = v
	}
	v, err := a.cpu.value(a.now(), 3*a.interval)
	set(MetricCPULoad, v, err)
	v, err = memLoad(a.fs)
	set(MetricMemLoad, v, err)
	v, err = loadAvgLoad(a.fs)
	set(MetricLoadAvg, v, err)
	for _, r := range a.scripts(ctx) {
		set(r.name, r.value, r.err)
	}
	a.logChanges(metrics, missing)
	a.snap = Report{
		Version:     ReportVersion,
		Agent:       a.name,
		TimestampMS: a.now().UnixMilli(),
		Metrics:     metrics,
	}
	if len(missing) > 0 {
		a.snap.Missing = missing
	}
	return a.snap
}

// scripts lists and runs the metric scripts, if there is a directory.
func (a *Agent) scripts(ctx context.Context) []scriptResult {
	if a.scriptsDir == "" {
		return nil
	}
	list, err := listScripts(a.scriptsDir)
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg != a.lastDirErr {
		if msg != "" {
			a.log.Warn("no metric scripts", "dir", a.scriptsDir, "err", err)
		} else {
			a.log.Info("metric scripts directory readable again", "dir", a.scriptsDir)
		}
		a.lastDirErr = msg
	}
	if len(list) > MaxScripts {
		a.log.Warn("too many metric scripts; ignoring the last ones", "dir", a.scriptsDir, "found", len(list), "max", MaxScripts)
		list = list[:MaxScripts]
	}
	return runScripts(ctx, list, a.scriptTimeout)
}

// logChanges logs a metric that became missing (or changed reason) at Warn
// and one that came back at Info, so that a failing script is logged once,
// not at every request.
func (a *Agent) logChanges(metrics map[string]float64, missing map[string]string) {
	for name, reason := range missing {
		switch {
		case a.lastMissing[name] == reason:
		case strings.HasPrefix(reason, errNoValueYet.Error()):
			a.log.Debug("metric missing", "metric", name, "reason", reason)
		default:
			a.log.Warn("metric missing", "metric", name, "reason", reason)
		}
	}
	for name := range a.lastMissing {
		if _, still := missing[name]; still {
			continue
		}
		if _, ok := metrics[name]; ok {
			a.log.Info("metric available again", "metric", name)
		} else {
			a.log.Info("metric no longer reported", "metric", name)
		}
	}
	a.lastMissing = missing
}
