// Command dlbmetricd is dlb's Metric Server agent. It runs on each backend
// and answers dlbd's manager with signed reports of the backend's load:
// CPU, memory and load average, plus the operator's metric scripts. See
// package metricserver for the protocol.
//
// It needs no privileges: it reads /proc and listens on an unprivileged
// port (10004 by default).
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/dlbproject/dlb/internal/logqueue"
	"github.com/dlbproject/dlb/pkg/connlimit"
	"github.com/dlbproject/dlb/pkg/metricserver"
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "dev"

type options struct {
	listen        string
	secretFile    string
	scriptsDir    string
	scriptTimeout time.Duration
	name          string
	procRoot      string
	tlsCert       string
	tlsKey        string
	clientCA      string
	logLevel      string
	logFormat     string
	once          bool
}

func main() {
	if err := execute(context.Background(), newCommand(os.Stdout, os.Stderr), os.Stderr, os.Args[1:]); err != nil {
		os.Exit(1)
	}
}

// execute runs cmd with args and prints its error to stderr, whatever it
// is: a flag or an argument cobra refused (silenced there) as well as an
// error run returned.
func execute(ctx context.Context, cmd *cobra.Command, stderr io.Writer, args []string) error {
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "dlbmetricd:", err)
	}
	return err
}

const long = `dlbmetricd is the Metric Server agent of dlb: it runs on a backend server
and reports the server's load to the dlb manager (dlbd), which polls it and
folds the figures into the "system" proportion of the server's weight.

METRICS (each a load from 0 to 100)
  cpuload   busy share of all CPUs over the last second, from /proc/stat
            sampled every second (idle = idle + iowait)
  memload   100 x (1 - MemAvailable/MemTotal), from /proc/meminfo
  loadavg   100 x load1 / number of CPUs, capped at 100
  scripts   every executable file in --scripts-dir is a metric named after
            the file (a script named cpuload or memload or loadavg replaces
            the built-in). It must print one number (a trailing % is fine)
            and exit 0 within --script-timeout, or it is killed with its
            process group. Output is capped at 4 KiB. Values are clamped to
            0..100 (250 -> 100, -3 -> 0). A script that prints no number,
            fails, times out, or may be written by group or others is
            reported under "missing" with the reason, never as 0.

PROTOCOL
  GET /v1/report?nonce=N      N: 16-128 chars of A-Z a-z 0-9 - _, fresh per request
  200 application/json, header X-Dlb-Signature: hex(HMAC-SHA256(secret, body))
  {"version":1, "agent":"web1", "nonce":"N", "seq":1730000000123456,
   "timestamp_ms":1730000000123, "metrics":{"cpuload":12.5,"memload":40.31},
   "missing":{"diskload":"killed after the 2s timeout"}}
  The client checks the signature over the exact body bytes, that the nonce
  is its own, that seq increased, that timestamp_ms is within 5 s of its clock
  and that values are in 0..100. seq = max(previous+1, clock in µs), so it
  keeps increasing across restarts.

SECRET
  --secret-file is required: the shared secret (at least 16 bytes, white
  space trimmed), mode 0600 or 0400. The same file is given to dlbd.
    head -c 32 /dev/urandom | base64 > /etc/dlb/metric.secret
    chmod 600 /etc/dlb/metric.secret
  Under systemd, pass it with LoadCredential= (see dlbmetricd.service).

TLS (optional)
  --tls-cert and --tls-key serve HTTPS; --client-ca then requires client
  certificates signed by that CA (mutual TLS). The signed report is still
  required: TLS is an extra layer, not a replacement for the secret.

--once prints one collection as JSON and exits (no secret needed), to check
scripts. dlbmetricd needs no privileges; stop it with SIGTERM or SIGINT.
SIGHUP (a log rotation's, a "reload") is logged and changes nothing: the
scripts are read at each report, the secret and TLS files at start (restart
dlbmetricd to change those).`

func newCommand(stdout, stderr io.Writer) *cobra.Command {
	var o options
	cmd := &cobra.Command{
		Use:           "dlbmetricd --secret-file FILE [flags]",
		Short:         "dlb Metric Server agent: reports this backend's load to dlbd",
		Long:          long,
		Version:       version,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), o, stdout, stderr)
		},
	}
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", fmt.Sprintf(":%d", metricserver.DefaultPort), "address and port to listen on")
	f.StringVar(&o.secretFile, "secret-file", "", "file holding the shared secret (required; mode 0600 or 0400)")
	f.StringVar(&o.scriptsDir, "scripts-dir", "", "directory of metric scripts (optional)")
	f.DurationVar(&o.scriptTimeout, "script-timeout", metricserver.DefaultScriptTimeout, "time a metric script may run before it is killed")
	f.StringVar(&o.name, "name", "", "agent name put in reports (default: the host name)")
	f.StringVar(&o.procRoot, "proc", "/proc", "mount point of the proc file system to read")
	f.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate: serve HTTPS (needs --tls-key)")
	f.StringVar(&o.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	f.StringVar(&o.clientCA, "client-ca", "", "PEM CA bundle: require client certificates signed by it (needs --tls-cert)")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text (key=value) or json (one object a line)")
	f.BoolVar(&o.once, "once", false, "print one collection as JSON and exit (no secret needed)")
	return cmd
}

// config is what run needs once the options are checked.
type config struct {
	log    *slog.Logger
	secret []byte
	tls    *tls.Config
}

// logFormat reads --log-level and --log-format: the handler maker of
// the agent's log lines.
func logFormat(o options) (func(io.Writer) slog.Handler, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(strings.ToUpper(o.logLevel))); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	format, err := logqueue.Format(o.logFormat, &slog.HandlerOptions{Level: level})
	if err != nil {
		return nil, fmt.Errorf("--log-format: %w", err)
	}
	return format, nil
}

// check validates the options and loads the secret and TLS files; it is
// everything that can refuse to start. The log goes to log.
func check(o options, log *slog.Logger) (config, error) {
	c := config{log: log}
	if o.scriptTimeout <= 0 {
		return c, fmt.Errorf("--script-timeout: %s is not positive", o.scriptTimeout)
	}
	if o.scriptsDir != "" {
		fi, err := os.Stat(o.scriptsDir)
		if err != nil {
			return c, fmt.Errorf("--scripts-dir: %w", err)
		}
		if !fi.IsDir() {
			return c, fmt.Errorf("--scripts-dir: %s is not a directory", o.scriptsDir)
		}
	}
	if o.once {
		return c, nil
	}
	if o.secretFile == "" {
		return c, errors.New("--secret-file is required: create one with\n" +
			"  head -c 32 /dev/urandom | base64 > /etc/dlb/metric.secret && chmod 600 /etc/dlb/metric.secret")
	}
	secret, err := metricserver.LoadSecret(o.secretFile)
	if err != nil {
		return c, fmt.Errorf("--secret-file: %w", err)
	}
	c.secret = secret
	if _, _, err := net.SplitHostPort(o.listen); err != nil {
		return c, fmt.Errorf("--listen: %w", err)
	}
	switch {
	case o.tlsCert != "" || o.tlsKey != "":
		if c.tls, err = metricserver.ServerTLSConfig(o.tlsCert, o.tlsKey, o.clientCA); err != nil {
			return c, fmt.Errorf("--tls-cert/--tls-key/--client-ca: %w", err)
		}
	case o.clientCA != "":
		return c, errors.New("--client-ca needs --tls-cert and --tls-key")
	}
	return c, nil
}

func run(ctx context.Context, o options, stdout, stderr io.Writer) error {
	// Log lines go through a queue: a stuck reader of standard error
	// costs lines, not the reports the dispatchers wait for.
	format, err := logFormat(o)
	if err != nil {
		return err
	}
	logq := logqueue.New(stderr, logqueue.Options{Handler: format})
	defer logq.Close(2 * time.Second)
	c, err := check(o, slog.New(format(logq)))
	if err != nil {
		return err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// SIGHUP would end the agent, and systemd counts that a clean exit:
	// Restart=on-failure would leave the backend without reports.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// A log reader that went away (a pipe to a logger that ended) must
	// not end the daemon: unless SIGPIPE is caught, Go exits on a write
	// to a broken standard error. Caught, the write fails and the log
	// line is lost. (Caught, not ignored: programs it starts get the
	// default back.)
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)

	secret := c.secret
	if o.once {
		// Collect signs nothing; the agent just needs a well-formed secret.
		secret = []byte(strings.Repeat("x", metricserver.MinSecretLen))
	}
	agent, err := metricserver.NewAgent(metricserver.AgentOptions{
		Secret:        secret,
		Name:          o.name,
		ProcRoot:      o.procRoot,
		ScriptsDir:    o.scriptsDir,
		ScriptTimeout: o.scriptTimeout,
		Logger:        c.log,
	})
	if err != nil {
		return err
	}
	agentCtx, cancelAgent := context.WithCancel(ctx)
	defer cancelAgent()
	go agent.Run(agentCtx)

	if o.once {
		return printOnce(ctx, agent, stdout)
	}

	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listening: %w", err)
	}
	// Requests are not authenticated (reports are signed): a host may
	// open connections and leave them idle; they must not take the
	// agent's descriptors or the dispatchers' places.
	ln = connlimit.New(ln, "metric server", connlimit.DefaultTotal, connlimit.DefaultPerClient, c.log)
	srv := &http.Server{
		Handler:           agent,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      o.scriptTimeout + 10*time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    8 << 10,
		ErrorLog:          slog.NewLogLogger(c.log.Handler(), slog.LevelDebug),
		TLSConfig:         c.tls,
	}
	srvErr := make(chan error, 1)
	go func() {
		if c.tls != nil {
			srvErr <- srv.ServeTLS(ln, "", "")
		} else {
			srvErr <- srv.Serve(ln)
		}
	}()
	c.log.Info("dlbmetricd started", "version", version, "listen", ln.Addr().String(),
		"tls", c.tls != nil, "mutual_tls", c.tls != nil && c.tls.ClientCAs != nil,
		"scripts_dir", o.scriptsDir, "script_timeout", o.scriptTimeout)
	// The socket listens and the secret was read: ready for systemd
	// (Type=notify).
	if _, err := daemon.SdNotify(false, "READY=1"); err != nil {
		c.log.Error("telling systemd dlbmetricd is ready", "err", err)
	}

	for serving := true; serving; {
		select {
		case <-ctx.Done():
			serving = false
		case err = <-srvErr:
			serving = false
		case <-hup:
			c.log.Warn("SIGHUP: nothing to reload: metric scripts are read at each report, the secret and TLS files at start; restart dlbmetricd to change those (systemctl restart dlbmetricd)")
		}
	}
	_, _ = daemon.SdNotify(false, "STOPPING=1")
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutCtx)
	c.log.Info("dlbmetricd stopped")
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving reports: %w", err)
	}
	return nil
}

// printOnce waits for the CPU sampler's second sample, then prints one
// collection.
func printOnce(ctx context.Context, agent *metricserver.Agent, stdout io.Writer) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(metricserver.DefaultSampleInterval + 100*time.Millisecond):
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(agent.Collect(ctx))
}
