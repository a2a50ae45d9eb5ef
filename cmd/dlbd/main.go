// Command dlbd is the dlb dispatcher daemon: it owns the XDP executor, keeps
// the desired configuration (persisted in its state directory), and serves
// the admin API that dlbctl talks to on a unix socket.
//
// Killing or restarting dlbd, SIGKILL included, does not stop forwarding:
// the executor's program, maps and XDP link are pinned under --pin-dir and
// the next dlbd adopts them. "dlbctl executor stop" detaches the executor.
package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/dlbproject/dlb/internal/logqueue"
	"github.com/dlbproject/dlb/pkg/bgp"
	"github.com/dlbproject/dlb/pkg/client"
	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/connlimit"
	"github.com/dlbproject/dlb/pkg/datapath"
	"github.com/dlbproject/dlb/pkg/dispatcher"
	"github.com/dlbproject/dlb/pkg/doctor"
	"github.com/dlbproject/dlb/pkg/ha"
	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/metricserver"
	"github.com/dlbproject/dlb/pkg/netif"
	"github.com/dlbproject/dlb/pkg/server"
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "dev"

type options struct {
	socket        string
	stateDir      string
	pinDir        string
	logLevel      string
	logFormat     string
	scriptsDir    string
	scriptTimeout time.Duration
	// The admin API's limits.
	maxRequestSize           int64
	bodyTimeout, idleTimeout time.Duration
	profiling                bool
	cpuProfile               string
	// The configuration file applied at start and on SIGHUP, and the one
	// to check and exit.
	configFile, checkConfig string
	// metricsAddress is where /metrics and the web console are served
	// ("": nowhere).
	metricsAddress string
	// The admin API's TCP listener: address, TLS certificate and key,
	// and the token file ("": no listener).
	apiAddress, apiCert, apiKey, apiTokenFile string
	// The executor's table sizes; other sizes at a restart replace the
	// pinned executor (its connections carried over).
	connTableSize, natTableSize, halfOpenTableSize, affinityTableSize uint32
	maxServices, maxServers, maxTableSize                             uint32
}

func main() {
	// Every error is printed here, once: one from a flag or an argument
	// cobra refused (silenced there) as well as one run returned.
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "dlbd:", err)
		if h := permissionHint(err, os.Geteuid()); h != "" {
			fmt.Fprintln(os.Stderr, "dlbd:", h)
		}
		os.Exit(1)
	}
}

// permissionHint says what a user other than root (euid) that dlbd
// refused for want of permission lacks; "" for other errors and root.
func permissionHint(err error, euid int) string {
	if euid == 0 || !errors.Is(err, fs.ErrPermission) {
		return ""
	}
	return "dlbd runs as root, or as a user with CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON (CAP_NET_RAW and " +
		"CAP_NET_BIND_SERVICE for some functions) who owns its pin directory, state directory and socket's directory, " +
		"as the package's dlbd.service runs it (README: \"Run under systemd\")"
}

func newCommand() *cobra.Command {
	var o options
	// The executor's own sizes are the flags' defaults: nothing here
	// repeats them.
	def, defErr := datapath.Defaults()
	cmd := &cobra.Command{
		Use:   "dlbd",
		Short: "dlb dispatcher daemon (XDP L4 load balancer)",
		Long: `dlbd runs the dlb dispatcher: it loads the XDP executor, keeps the
configuration of clusters, ports and servers (changed with dlbctl and
persisted in --state-dir after every accepted change), and serves the admin
API on a unix socket (and, with --api-address, on a TCP listener over TLS to
holders of a token: dlbctl --host).

The executor's program, maps and XDP link are pinned under --pin-dir, so
restarting or killing dlbd never stops forwarding or loses the connection
table: the next dlbd adopts them. "dlbctl executor stop" detaches it.

With --config FILE, dlbd makes its configuration equal to FILE (YAML; see
"dlbctl apply --help") once the saved state is restored, and again on
SIGHUP ("systemctl reload dlbd"), each time as one change: all of it or,
if anything is refused, none of it (the reason is logged). An invalid FILE
stops dlbd before it touches anything; one the host refuses at start (an
interface missing, say) is logged and dlbd runs the saved configuration.
--check-config FILE checks FILE and exits: 0 when it is valid, 1 with its
errors (line and field) otherwise; it touches nothing.`,
		Version:       version,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.checkConfig != "" {
				return checkConfig(o.checkConfig, cmd.OutOrStdout())
			}
			if defErr != nil {
				return defErr
			}
			return run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.socket, "socket", client.DefaultSocket, "unix socket of the admin API (mode 0660)")
	f.StringVar(&o.stateDir, "state-dir", "/var/lib/dlb", "directory of the persisted configuration")
	f.StringVar(&o.pinDir, "pin-dir", datapath.DefaultPinDir, "bpffs directory where the executor is pinned")
	f.Uint32Var(&o.connTableSize, "conn-table-size", def.ConnTableSize, "capacity of the connection table (another size at a restart: connections carried over)")
	f.Uint32Var(&o.natTableSize, "nat-table-size", def.NATTableSize, "capacity of the NAT connection tables (another size at a restart: connections carried over)")
	f.Uint32Var(&o.halfOpenTableSize, "halfopen-table-size", def.HalfOpenTableSize,
		"slots of the NAT half-open table, a power of two; at most a quarter of the smallest return-address port pool (another size at a restart: connections carried over)")
	f.Uint32Var(&o.affinityTableSize, "affinity-table-size", def.AffinityTableSize, "capacity of the affinity-record table (another size at a restart: connections carried over)")
	f.Uint32Var(&o.maxServers, "max-servers", def.MaxBackends-1, "servers the executor holds, counting each server once per port (another size at a restart: connections carried over)")
	f.Uint32Var(&o.maxServices, "max-ports", def.MaxServices-1, "ports (cluster@port) the executor holds (another size at a restart: connections carried over)")
	f.Uint32Var(&o.maxTableSize, "max-table-size", def.MaxTableSize,
		"largest Maglev table of a port, a prime; a port's table is a prime of about 100 slots per server up to this (another size at a restart: connections carried over)")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text (key=value) or json (one object a line, for collectors)")
	f.StringVar(&o.scriptsDir, "scripts-dir", "/etc/dlb/scripts",
		"directory of event scripts run on serverDown, serverUp, managerAlert, managerClear, halfOpenAlert, halfOpenAlertDone, executorDetached and executorAttached")
	f.DurationVar(&o.scriptTimeout, "script-timeout", 10*time.Second, "an event script is killed when it runs longer")
	f.Int64Var(&o.maxRequestSize, "max-request-size", 0,
		"largest admin API request body in bytes; a larger one is refused (413) and nothing of it applied (0: 512 bytes per --max-servers and 1 KiB per --max-ports, at least 8 MiB and at most 512 MiB, so that a whole configuration fits)")
	f.DurationVar(&o.bodyTimeout, "request-timeout", server.DefaultBodyTimeout,
		"an admin API request whose body does not arrive within this time is dropped (408)")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file, suffixed with dlbd's PID")
	_ = f.MarkHidden("cpuprofile")
	f.BoolVar(&o.profiling, "pprof", false, "serve Go's runtime profiles at /debug/pprof/ on the admin socket")
	f.DurationVar(&o.idleTimeout, "idle-timeout", server.DefaultIdleTimeout,
		"an idle keep-alive connection to the admin API is closed after this time")
	f.StringVar(&o.configFile, "config", "", "configuration file (YAML) made the configuration at start, after the saved state is restored, and on SIGHUP")
	f.StringVar(&o.checkConfig, "check-config", "", "check a configuration file and exit (0: valid; 1: its errors, with line numbers); touches nothing")
	_ = cmd.MarkFlagFilename("config", "yaml", "yml", "json")
	_ = cmd.MarkFlagFilename("check-config", "yaml", "yml", "json")
	f.StringVar(&o.metricsAddress, "metrics-address", "",
		"serve Prometheus metrics (/metrics) and the read-only web console (/) on this HOST:PORT, e.g. 127.0.0.1:9917 (default: off)")
	f.StringVar(&o.apiAddress, "api-address", "",
		"also serve the admin API on this ADDRESS:PORT (the NFA), over TLS and to holders of the token only: dlbctl --host (default: off)")
	f.StringVar(&o.apiCert, "api-cert", "", "the TLS certificate (PEM, with its chain) of --api-address")
	f.StringVar(&o.apiKey, "api-key", "", "the TLS private key (PEM) of --api-address")
	f.StringVar(&o.apiTokenFile, "api-token-file", "",
		"the file holding the token --api-address requires (at least 16 characters, readable by its owner only)")
	return cmd
}

// requestSizeFor is the request body limit for an executor of maxServers
// servers and maxPorts ports: a whole configuration must fit in one
// request ("dlbctl apply -f" of what "dlbctl get" printed). A server takes
// 130 bytes of YAML (IPv4, NAT with its return address and router) to 380
// (IPv6 and every setting, in JSON), a port with every setting 230 more:
// 512 and 1,024 leave room for comments.
func requestSizeFor(maxServers, maxPorts uint32) int64 {
	const perServer, perPort, most = 512, 1024, 512 << 20
	return min(max(server.DefaultMaxRequestSize, perServer*(int64(maxServers)+1)+perPort*(int64(maxPorts)+1)), most)
}

func run(ctx context.Context, o options) error {
	if o.cpuProfile != "" {
		f, err := os.Create(fmt.Sprintf("%s.%d", o.cpuProfile, os.Getpid()))
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(strings.ToUpper(o.logLevel))); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	// Log lines go through a queue: a stuck reader of standard error
	// (journald, a logger) costs lines, not dlbd's answers, probes and
	// takeovers. Closed last, after dlbd's last line.
	format, err := logqueue.Format(o.logFormat, &slog.HandlerOptions{Level: level})
	if err != nil {
		return fmt.Errorf("--log-format: %w", err)
	}
	logq := logqueue.New(os.Stderr, logqueue.Options{Handler: format})
	defer logq.Close(2 * time.Second)
	log := slog.New(format(logq))
	wdLimit := watchdogLimit(log)
	// From the start: a SIGTERM while dlbd starts must stop it cleanly
	// (releasing what it took), not kill it.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// SIGHUP reloads the configuration file; caught from the start, so
	// that one sent while dlbd starts does not kill it (its default).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// A log reader that went away (a pipe to a logger that ended) must
	// not end the daemon: unless SIGPIPE is caught, Go exits on a write
	// to a broken standard error. Caught, the write fails and the log
	// line is lost. (Caught, not ignored: programs it starts get the
	// default back.)
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	for _, t := range []struct {
		flag   string
		v      uint32
		lo, hi uint32
	}{
		{"conn-table-size", o.connTableSize, 1024, 1 << 26}, {"nat-table-size", o.natTableSize, 1024, 1 << 26},
		{"halfopen-table-size", o.halfOpenTableSize, 1024, 1 << 26}, {"affinity-table-size", o.affinityTableSize, 1024, 1 << 26},
		{"max-servers", o.maxServers, 1, 1<<24 - 1}, {"max-ports", o.maxServices, 1, 1<<20 - 1},
		{"max-table-size", o.maxTableSize, lb.MinTableSize, lb.MaxTableSize},
	} {
		if t.v < t.lo || t.v > t.hi {
			return fmt.Errorf("--%s: %d is outside %d..%d", t.flag, t.v, t.lo, t.hi)
		}
	}
	if n := o.halfOpenTableSize; n&(n-1) != 0 {
		return fmt.Errorf("--halfopen-table-size: %d is not a power of two", n)
	}
	if !lb.ValidTableSize(o.maxTableSize) {
		return fmt.Errorf("--max-table-size: %d is not a prime", o.maxTableSize)
	}
	switch {
	case o.maxRequestSize == 0:
		o.maxRequestSize = requestSizeFor(o.maxServers, o.maxServices)
	case o.maxRequestSize < 1024:
		return fmt.Errorf("--max-request-size: %d is below 1024 bytes", o.maxRequestSize)
	}
	for _, t := range []struct {
		flag string
		v    time.Duration
	}{{"request-timeout", o.bodyTimeout}, {"idle-timeout", o.idleTimeout}} {
		if t.v <= 0 {
			return fmt.Errorf("--%s: %s is not a positive duration", t.flag, t.v)
		}
	}
	if err := checkMetricsAddress(o.metricsAddress); err != nil {
		return err
	}
	if err := client.CheckSocketPath(o.socket); err != nil {
		return fmt.Errorf("--socket: %w", err)
	}
	remote, err := checkRemoteAPI(o.apiAddress, o.apiCert, o.apiKey, o.apiTokenFile)
	if err != nil {
		return err
	}

	// An invalid configuration file stops dlbd before it touches anything.
	var file *config.File
	if o.configFile != "" {
		var err error
		if file, err = readConfigFile(o.configFile); err != nil {
			return err
		}
	}

	// A dlbd answering on the socket refuses this one before it creates
	// its directories (OpenSocket checks again, for a dlbd started since).
	if server.SocketLive(o.socket) {
		return fmt.Errorf("another dlbd is listening on %s", o.socket)
	}
	// Nothing is touched before this dlbd owns its state and pin
	// directories: not the state, not the executor, not the socket.
	owned, err := own(o.stateDir, o.pinDir)
	if err != nil {
		return err
	}
	defer owned.release()
	if privatePins(owned.mountedBPFFS) {
		log.Warn("the pin directory is on a bpffs only this dlbd's mount namespace sees (\"ip netns exec\" makes one, with its own /sys): "+
			"the executor goes with it when dlbd exits, and a restart cannot adopt it; run dlbd with \"nsenter --net=/run/netns/NAME\" instead",
			"pin_dir", o.pinDir)
	}

	nif := netif.New()
	var guard dispatcher.Guard
	if g, err := datapath.NewGuard(); err != nil {
		log.Warn("no guard: the host may answer traffic to cluster addresses the executor does not take with resets", "err", err)
	} else {
		defer g.Close()
		hg := &hostGuard{g: g, nif: nif}
		defer hg.leave()
		guard = hg
	}
	engine, err := dispatcher.New(dispatcher.Options{
		StateDir:  o.stateDir,
		StateLock: owned.state,
		PinLock:   owned.pins,
		OpenDatapath: func() (dispatcher.Datapath, error) {
			start := time.Now()
			dp, err := datapath.Open(datapath.Options{PinDir: o.pinDir, ConnTableSize: o.connTableSize,
				NATTableSize: o.natTableSize, HalfOpenTableSize: o.halfOpenTableSize, AffinityTableSize: o.affinityTableSize,
				MaxServices: o.maxServices + 1, MaxBackends: o.maxServers + 1, MaxTableSize: o.maxTableSize})
			if err != nil {
				return nil, err
			}
			took := time.Since(start).Round(time.Millisecond)
			if adopted, why := dp.ProgramAdopted(); adopted {
				log.Info("adopted the pinned executor program: the same build, not loaded again", "took", took)
			} else {
				log.Info("loaded the executor program", "not_adopted", why, "took", took)
			}
			return dp, nil
		},
		RemovePins:       func() ([]string, error) { return datapath.RemovePins(o.pinDir) },
		Pins:             func() ([]string, error) { return datapath.Pins(o.pinDir) },
		PinnedAttachment: func() (lb.Attachment, bool, error) { return datapath.PinnedAttachment(o.pinDir) },
		Netif:            nif,
		Guard:            guard,
		Logger:           log,
		ScriptsDir:       o.scriptsDir,
		ScriptTimeout:    o.scriptTimeout,
		NewMetricSource:  newMetricSource(metricserver.NewClient(metricserver.ClientOptions{})),
		CheckMetrics:     checkMetrics,
		MetricErrorClass: metricErrorClass,
		// Runs once configured; keeps the secret the peer was last heard
		// with beside the state, for a restart amid a rotation.
		HA:               ha.New(ha.Options{Logger: log, PeerSecretFile: filepath.Join(o.stateDir, ha.PeerSecretFileName)}),
		Speaker:          bgp.New(log), // runs once "bgp set" configured it
		MaxServices:      o.maxServices + 1,
		MaxBackends:      o.maxServers + 1,
		AddressAnswerers: doctor.AddressAnswerers,
	})
	if err != nil {
		return err
	}

	sock, err := server.OpenSocket(o.socket, server.SocketOptions{Mode: 0o660, Logger: log})
	if err != nil {
		return err
	}
	// Close removes the socket file only if it is still the one this
	// dlbd created.
	defer sock.Close()

	var monitorL net.Listener
	if o.metricsAddress != "" {
		if monitorL, err = listenMonitor(o.metricsAddress, log); err != nil {
			return err
		}
		defer monitorL.Close()
	}
	var remoteL net.Listener
	if remote != nil {
		if remoteL, err = net.Listen("tcp", remote.address); err != nil {
			return fmt.Errorf("--api-address: %w", err)
		}
		// Connections opened and left idle by a host without the
		// token must not take the file descriptors and goroutines
		// dlbd needs.
		remoteL = connlimit.New(remoteL, "admin API", connlimit.DefaultTotal, connlimit.DefaultPerClient, log)
		defer remoteL.Close()
	}

	engineDone := make(chan struct{})
	go func() {
		engine.Run(ctx)
		close(engineDone)
	}()
	// The file wins over the saved state, as one change, before the API
	// serves; then SIGHUP applies it again.
	cf := &configFile{path: o.configFile, e: engine, log: log}
	if file != nil {
		if err := cf.apply(ctx, file); err != nil {
			log.Error("applying the configuration file at start failed; running the saved configuration", "err", err)
		}
	}
	go cf.reloads(ctx, hup)

	srv := server.NewServer(engine, server.Options{MaxRequestSize: o.maxRequestSize, SizeSetting: "dlbd --max-request-size",
		BodyTimeout: o.bodyTimeout, IdleTimeout: o.idleTimeout, Logger: log, Profiling: o.profiling,
		ServerChecker: newServerChecker(engineExecutor(engine))})
	srvErr := make(chan error, 3)
	go func() { srvErr <- sock.Serve(srv) }()
	var remoteSrv *http.Server
	if remoteL != nil {
		// The same API, each request checked for the token first.
		remoteSrv = server.NewServer(engine, server.Options{MaxRequestSize: o.maxRequestSize, SizeSetting: "dlbd --max-request-size",
			BodyTimeout: o.bodyTimeout, IdleTimeout: o.idleTimeout, Logger: log, Profiling: o.profiling,
			ServerChecker: newServerChecker(engineExecutor(engine))})
		remoteSrv.Handler = server.RequireToken(remoteSrv.Handler, remote.token)
		remoteSrv.TLSConfig = remote.tls
		go func() {
			if err := remoteSrv.ServeTLS(remoteL, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
				srvErr <- fmt.Errorf("serving the admin API on %s: %w", remote.address, err)
			}
		}()
		log.Info("serving the admin API over TLS to holders of the token", "address", remoteL.Addr().String())
	}
	var monitor *http.Server
	if monitorL != nil {
		monitor = newMonitorServer(engine, log)
		go func() {
			if err := monitor.Serve(monitorL); err != nil && !errors.Is(err, http.ErrServerClosed) {
				srvErr <- fmt.Errorf("serving metrics on %s: %w", o.metricsAddress, err)
			}
		}()
		log.Info("serving metrics and the web console", "metrics", "http://"+monitorL.Addr().String()+"/metrics",
			"console", "http://"+monitorL.Addr().String()+"/")
	}
	log.Info("dlbd started", "version", version, "socket", o.socket, "state_dir", o.stateDir, "pin_dir", o.pinDir)
	notifier := make(chan struct{})
	go func() {
		defer close(notifier)
		// systemd (Type=notify) learns that dlbd is ready when its API
		// answers; see notify.go. A dlbd stopped before that is not a
		// failure to say so.
		if err := notifyReady(ctx, apiReady(o.socket), time.Minute, log); err != nil {
			if ctx.Err() == nil {
				log.Error("telling systemd dlbd is ready", "err", err)
			}
			return
		}
		if wdLimit > 0 {
			log.Info("feeding systemd's watchdog while dlbd's management loop answers", "limit", wdLimit)
			watchdog(ctx, engineAnswers(engine), engine.Busy, wdLimit/3, log)
		}
	}()

	select {
	case <-ctx.Done():
	case err = <-srvErr:
		stop()
	}
	_, _ = daemon.SdNotify(false, "STOPPING=1")
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutCtx)
	if remoteSrv != nil {
		_ = remoteSrv.Shutdown(shutCtx)
	}
	if monitor != nil {
		_ = monitor.Shutdown(shutCtx)
	}
	<-engineDone
	<-notifier // it ends with ctx: no line comes after the last
	log.Info("dlbd stopped; the executor stays pinned and keeps forwarding")
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving the API: %w", err)
	}
	return nil
}

// newMetricSource returns the engine's factory of metric pollers: dlb's
// authenticated agent through one shared client (which remembers every
// agent's sequence numbers), or a Prometheus endpoint.
func newMetricSource(client *metricserver.Client) func(lb.MetricServer, netip.Addr, netip.Addr, []string) (dispatcher.MetricSource, error) {
	return func(ms lb.MetricServer, server, source netip.Addr, names []string) (dispatcher.MetricSource, error) {
		addr := netip.AddrPortFrom(server, ms.Port)
		switch ms.Source {
		case "prometheus":
			queries, err := promQueries(names)
			if err != nil {
				return nil, err
			}
			src, err := metricserver.NewPromSource("http://"+addr.String()+ms.Path, metricserver.PromOptions{Source: source})
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context) (map[string]float64, time.Time, error) {
				r, err := src.Fetch(ctx, queries)
				return r.Metrics, r.Time(), err
			}, nil
		default:
			secret, err := agentSecret(ms)
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context) (map[string]float64, time.Time, error) {
				r, err := client.Fetch(ctx, addr, metricserver.FetchOptions{Secret: secret, Source: source})
				return r.Metrics, r.Time(), err
			}, nil
		}
	}
}

// checkMetrics refuses metric settings newMetricSource could not make
// pollers of: a Prometheus query that does not parse; for dlbmetricd, no
// secret file or one LoadSecret refuses (missing, open to others, too
// short).
func checkMetrics(ms lb.MetricServer, names []string) error {
	var err error
	if ms.Source == "prometheus" {
		_, err = promQueries(names)
	} else {
		_, err = agentSecret(ms)
	}
	return err
}

// promQueries parses metric names as Prometheus queries; a refusal names
// the metric.
func promQueries(names []string) ([]metricserver.PromQuery, error) {
	queries := make([]metricserver.PromQuery, len(names))
	for i, n := range names {
		q, err := metricserver.ParsePromQuery(n)
		if err != nil {
			return nil, lb.Errorf("metric", n, "%v", err)
		}
		queries[i] = q
	}
	return queries, nil
}

// agentSecret reads the secret dlbmetricd's reports are signed with.
func agentSecret(ms lb.MetricServer) ([]byte, error) {
	if ms.SecretFile == "" {
		return nil, lb.Errorf("secretfile", "", "dlbmetricd's reports are authenticated with a shared secret: "+
			"dlbctl metric set --secret-file FILE first")
	}
	secret, err := metricserver.LoadSecret(ms.SecretFile)
	if err != nil {
		return nil, lb.Errorf("secretfile", ms.SecretFile, "%v", err)
	}
	return secret, nil
}

// metricErrorClass names why a metric report was refused.
func metricErrorClass(err error) string {
	for _, c := range []struct {
		err  error
		name string
	}{
		{metricserver.ErrUnauthenticated, "unauthenticated"}, {metricserver.ErrReplayed, "replayed"},
		{metricserver.ErrMalformed, "malformed"}, {metricserver.ErrOutOfRange, "out_of_range"},
		{metricserver.ErrStale, "stale"}, {metricserver.ErrUnavailable, "unavailable"},
	} {
		if errors.Is(err, c.err) {
			return c.name
		}
	}
	return ""
}
