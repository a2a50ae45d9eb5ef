// Command dlbctl is the command line interface of dlbd, the dlb dispatcher
// daemon. It follows IBM Network Dispatcher's dscontrol: noun, verb, then a
// cluster@port@server target ("dlbctl server add 10.0.0.1@80@10.1.1.5
// --weight 5"), with '@' wildcards, '+' lists and unique prefixes of
// command names ("dlbctl se rep").
//
// dscontrol's own forms work too: ':' separators ("9.67.131.153:80:server1",
// IPv6 in brackets), "::" wildcards, partial report targets, keyword-value
// pairs after the target ("weight 5", "proportions 49 50 1 0"), and host
// names, which dlbctl resolves once and sends as addresses (target.go,
// keywords.go).
//
// dlbctl talks to dlbd over its admin API (package api) on a unix socket
// (or over TLS with a token at its TCP listener, --host);
// it checks syntax only and leaves every decision about values to dlbd, so
// that there is one authority on what a valid configuration is.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/client"
)

// Exit codes; documented in rootLong.
const (
	exitOK          = 0
	exitFailed      = 1 // dlbd refused, or the command failed
	exitUsage       = 2
	exitUnreachable = 3
	exitNoAnswer    = 4
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "dev"

func init() {
	// dscontrol accepts unique prefixes of keywords ("dscontrol se rep");
	// operators used to it type them. Cobra keeps this switch global, so
	// it is set once here rather than in run, which tests call in parallel.
	cobra.EnablePrefixMatching = true
}

func main() {
	os.Exit(run(osEnv(), os.Args[1:]))
}

// dlbClient is the part of *client.Client that dlbctl uses; tests may
// substitute it through env.newClient.
type dlbClient interface {
	Apply(ctx context.Context, ops ...api.Op) (api.Result, error)
	Executor(ctx context.Context) (api.ExecutorReport, error)
	Clusters(ctx context.Context, target string) ([]api.ClusterReport, error)
	Ports(ctx context.Context, target string) ([]api.PortReport, error)
	Servers(ctx context.Context, target string) ([]api.ServerReport, error)
	Manager(ctx context.Context, target string) (api.ManagerReport, error)
	Advisors(ctx context.Context) ([]api.AdvisorReport, error)
	Metrics(ctx context.Context) (api.MetricReport, error)
	ConfigScript(ctx context.Context) (string, error)
	ConfigFile(ctx context.Context, format string) ([]byte, error)
	ApplyConfig(ctx context.Context, file []byte, dryRun bool) (api.ConfigResult, error)
	BGP(ctx context.Context) (api.BGPReport, error)
	ServerCheck(ctx context.Context, target, client string) (api.ServerCheckReport, error)
	HA(ctx context.Context) (api.HAReport, error)
	Takeover(ctx context.Context, addr string) (api.Result, error)
}

// env is everything dlbctl takes from its process, so that tests can run
// it in-process.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	newClient      func(socket string, timeout time.Duration) dlbClient
	newRemote      func(r client.Remote, timeout time.Duration) (dlbClient, error)
	now            func() time.Time
	// resolver resolves the host names given for addresses.
	resolver resolver
}

func osEnv() *env {
	return &env{
		stdin:     os.Stdin,
		stdout:    os.Stdout,
		stderr:    os.Stderr,
		getenv:    os.Getenv,
		newClient: func(socket string, timeout time.Duration) dlbClient { return client.NewTimeout(socket, timeout) },
		newRemote: func(r client.Remote, timeout time.Duration) (dlbClient, error) { return client.NewRemote(r, timeout) },
		now:       time.Now,
		resolver:  net.DefaultResolver,
	}
}

// app is one invocation of dlbctl: the parsed global flags and how
// operations are dispatched.
type app struct {
	env     *env
	socket  string
	output  string
	timeout time.Duration
	// remote is dlbd's TCP admin listener (--host), used instead of the
	// socket when its address is set.
	remote client.Remote

	// collect, when non-nil, receives the operations that commands build
	// instead of sending them: "file load" runs each line of a script
	// through the command tree this way and sends the whole batch itself.
	collect *[]api.Op

	// ran records that a command's RunE was entered; errors that happen
	// before that (flags, arguments, required flags) are usage errors.
	ran bool

	cl dlbClient

	// target is the command's target once its argument check has
	// normalised it (see normTarget); resolved caches host names'
	// addresses.
	target   string
	resolved map[string]netip.Addr
}

// client returns the client for --socket, creating it on first use.
func (a *app) client() dlbClient {
	if a.cl == nil {
		a.cl = a.env.newClient(a.socket, a.timeout)
	}
	return a.cl
}

// usageError is an error in how dlbctl was invoked (exit 2).
type usageError struct {
	err error
	// help is the command whose --help the message points to; "" names
	// the command that failed, "-" suppresses the pointer.
	help string
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// run runs dlbctl with args (without the program name) and returns the
// exit code.
func run(e *env, args []string) int {
	a := &app{env: e}
	root := a.newRoot()
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(context.Background())
	if err == nil {
		return exitOK
	}
	return a.fail(cmd, err)
}

// fail prints err and maps it to an exit code.
func (a *app) fail(cmd *cobra.Command, err error) int {
	w := a.env.stderr
	var ue *usageError
	var re *resolveError
	switch {
	case errors.As(err, &re):
		// A host name that does not resolve is a bad value, as dlbd's
		// refusal of a bad address would be.
		fmt.Fprintf(w, "dlbctl: %v\n", err)
		return exitFailed
	case errors.As(err, &ue) || !a.ran:
		fmt.Fprintf(w, "dlbctl: %v\n", err)
		help := cmd.CommandPath()
		if ue != nil && ue.help != "" {
			help = ue.help
		}
		if help != "-" {
			fmt.Fprintf(w, "Run '%s --help' for usage.\n", help)
		}
		return exitUsage
	case errors.Is(err, client.ErrUnreachable):
		fmt.Fprintf(w, "dlbctl: %v\n", err)
		if a.remote.Address != "" {
			fmt.Fprintf(w, "dlbctl: does dlbd listen on %s (dlbd --api-address), and does --ca-file hold what signed its certificate (dlbd --api-cert)?\n", a.remote.Address)
		} else {
			fmt.Fprintf(w, "dlbctl: %s\n", socketHint(a.socket, err))
		}
		return exitUnreachable
	case errors.Is(err, client.ErrNoAnswer):
		fmt.Fprintf(w, "dlbctl: %v\n", err)
		fmt.Fprintf(w, "dlbctl: dlbd took the request and did not answer: is it stopped or stuck (systemctl status dlbd; journalctl -u dlbd)? A change may have been applied or not: a report shows which. --timeout waits longer.\n")
		return exitNoAnswer
	default:
		// dlbd's refusals already name the field and the object.
		fmt.Fprintf(w, "dlbctl: %v\n", err)
		return exitFailed
	}
}

const rootLong = `dlbctl configures and reports dlbd, the dlb dispatcher (an XDP layer 4
load balancer modelled on IBM Network Dispatcher; dlbctl is its dscontrol).

Commands read noun, verb, target:

  dlbctl server add 10.0.0.100@80@10.1.1.5 --weight 5

A target addresses objects as cluster@port@server. An empty component is a
wildcard for every existing object of that kind ("@80@10.1.1.5": that server
on port 80 of every cluster), and '+' joins several values
("10.0.0.100+10.0.0.101"). As in dscontrol, ':' may separate instead of '@'
("10.0.0.100:80:10.1.1.5"), IPv6 addresses then in brackets
("[2001:2::100]:80:[2001:2::21]"), and "::" stands for everything. Reports
take partial targets ("server report 10.0.0.100@80"). Host names may stand
for addresses: dlbctl resolves them once and sends the address. Unique
prefixes of command names are accepted ("dlbctl se rep" is "dlbctl server
report").

Parameters are flags (--weight 5) or, IBM style, keyword-value pairs after
the target: "dlbctl server set 10.0.0.100:80:10.1.1.5 weight 5",
"dlbctl cluster set 10.0.0.100 proportions 49 50 1 0".

dlbctl checks syntax only; dlbd checks values and refuses a change with a
message naming the field. Every change is applied all or none.

dlbctl reaches dlbd at its unix socket, or with --host ADDRESS:PORT at its
TCP admin listener (dlbd --api-address): over TLS, dlbd's certificate checked
against --ca-file, sending the token of --token-file.

Environment:
  DLB_SOCKET      dlbd's socket when --socket is not given (default ` + client.DefaultSocket + `)
  DLB_HOST        dlbd's TCP admin listener when --host is not given
  DLB_TOKEN_FILE  --token-file when not given
  DLB_CA_FILE     --ca-file when not given

Exit status:
  0  success
  1  dlbd refused the command (its message is printed), or the command failed
  2  usage error: unknown command or flag, wrong arguments, bad flag value
  3  dlbd is unreachable (not running, wrong socket, or no permission; with
     --host also a certificate not trusted, or a connection dlbd closed
     before the request: over its limit of open connections): nothing was
     sent
  4  dlbd took the request and did not answer (within --timeout, or it
     ended): a change may have been applied or not`

func (a *app) newRoot() *cobra.Command {
	return a.newRootOf(nil)
}

// newRootOf is newRoot with only the commands whose index in commands keep
// accepts (nil: all): a line of a script needs only its own.
func (a *app) newRootOf(keep func(int) bool) *cobra.Command {
	root := &cobra.Command{
		Use:   "dlbctl",
		Short: "Configure and report dlbd, the dlb dispatcher",
		Long:  rootLong,
		Example: `  dlbctl executor start --interface eth0
  dlbctl cluster add 10.0.0.100
  dlbctl port add 10.0.0.100@80
  dlbctl server add 10.0.0.100@80@10.1.1.5+10.1.1.6 --weight 10
  dlbctl server report -o json
  dlbctl file save /etc/dlb/dlb.cfg
  dlbctl apply -f /etc/dlb/dlb.yaml --diff`,
		SilenceErrors: true,
		SilenceUsage:  true,
		// Commands report their own errors (fail), and usage errors point
		// to --help instead of dumping the usage text.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if a.timeout < 0 {
				return usagef("invalid --timeout %s (want a duration of 0 or more: 0 waits as long as dlbd takes)", a.timeout)
			}
			switch a.output {
			case "table", "json", "yaml", "":
			default:
				return usagef("invalid --output %q (want table, json or yaml)", a.output)
			}
			return a.useRemote(cmd)
		},
	}
	root.SetOut(a.env.stdout)
	root.SetErr(a.env.stderr)
	// "dlbctl --version" prints what "dlbctl version" prints.
	root.Version = buildVersion()
	root.SetVersionTemplate("dlbctl {{.Version}} (admin API " + api.Version + ")\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err: err} })
	// Lines of a script take no global flags: the socket and the output
	// format belong to the "file load" that runs them.
	if a.collect == nil {
		sock := a.env.getenv("DLB_SOCKET")
		if sock == "" {
			sock = client.DefaultSocket
		}
		pf := root.PersistentFlags()
		pf.StringVar(&a.socket, "socket", sock, "dlbd's unix socket (env DLB_SOCKET)")
		pf.StringVar(&a.remote.Address, "host", a.env.getenv("DLB_HOST"),
			"reach dlbd at its TCP admin listener ADDRESS:PORT (dlbd --api-address) instead of its socket, over TLS (env DLB_HOST)")
		pf.StringVar(&a.remote.TokenFile, "token-file", a.env.getenv("DLB_TOKEN_FILE"),
			"with --host: the file holding dlbd's token (dlbd --api-token-file) (env DLB_TOKEN_FILE)")
		pf.StringVar(&a.remote.CAFile, "ca-file", a.env.getenv("DLB_CA_FILE"),
			"with --host: the certificates (PEM) that may sign dlbd's; default: the system's (env DLB_CA_FILE)")
		pf.StringVarP(&a.output, "output", "o", "table", "report format: table, json or yaml")
		pf.DurationVar(&a.timeout, "timeout", client.DefaultTimeout, "how long to wait for dlbd's answer (0: no limit)")
		_ = root.RegisterFlagCompletionFunc("output", fixedCompletion("table", "json", "yaml"))
	}
	for i, build := range a.commands() {
		if keep == nil || keep(i) {
			root.AddCommand(build())
		}
	}
	return root
}

// commands returns the builders of the root's commands.
func (a *app) commands() []func() *cobra.Command {
	return []func() *cobra.Command{a.executorCmd, a.clusterCmd, a.portCmd, a.serverCmd, a.managerCmd, a.advisorCmd,
		a.metricCmd, a.haCmd, a.bgpCmd, a.fileCmd, a.applyCmd, a.getCmd, a.statusCmd, a.versionCmd,
		a.backendCmd} // run on a backend host, not against dlbd (backend.go)
}

// runE wraps a command's body so that fail can tell errors of the body
// from errors cobra found before running it.
func (a *app) runE(f func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		a.ran = true
		return f(cmd, args)
	}
}

// socketHint says what an unreachable socket at path most likely means,
// from the error and what is at path.
func socketHint(path string, err error) string {
	other := "--socket or DLB_SOCKET name another socket"
	fi, serr := os.Stat(path)
	switch {
	case errors.Is(err, syscall.EACCES) || errors.Is(serr, fs.ErrPermission):
		return fmt.Sprintf("using %s needs root or group dlb (adduser $USER dlb, then log in again); %s.", path, other)
	case serr == nil && fi.Mode().Type() != fs.ModeSocket:
		what := "a regular file"
		if fi.IsDir() {
			what = "a directory"
		}
		return fmt.Sprintf("%s is %s, not dlbd's socket: %s (dlbd --socket; default %s).", path, what, other, client.DefaultSocket)
	case serr == nil:
		return fmt.Sprintf("no dlbd listens on %s (left by a dlbd that stopped?): is dlbd running (systemctl status dlbd)? Or %s.", path, other)
	}
	return fmt.Sprintf("there is no socket at %s: is dlbd running (systemctl status dlbd; it makes the socket when it starts)? Or %s.", path, other)
}

func fixedCompletion(values ...string) cobra.CompletionFunc {
	return func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return values, cobra.ShellCompDirectiveNoFileComp
	}
}

// localCommand annotates a command that does not talk to dlbd (and its
// subcommands): it needs no client.
const localCommand = "dlbctl-local"

// useRemote makes the client the one of --host when it is set: the token
// file and the CA certificates are read now, and a flag that goes with
// --host only, or --socket beside it, is a usage error.
func (a *app) useRemote(cmd *cobra.Command) error {
	for c := cmd; c != nil; c = c.Parent() {
		if c.Annotations[localCommand] != "" || c.Name() == "help" || c.Name() == "completion" ||
			strings.HasPrefix(c.Name(), cobra.ShellCompRequestCmd) {
			return nil
		}
	}
	f := cmd.Flags()
	if a.remote.Address == "" {
		// A line of a script (a.collect) reaches dlbd through the "file
		// load" that runs it, which checked its socket.
		if err := client.CheckSocketPath(a.socket); err != nil && a.collect == nil {
			from := "--socket"
			if !f.Changed("socket") {
				from = "DLB_SOCKET"
			}
			return usagef("%s: %v", from, err)
		}
		if a.remote.TokenFile != "" && f.Changed("token-file") || a.remote.CAFile != "" && f.Changed("ca-file") {
			return usagef("--token-file and --ca-file go with --host")
		}
		return nil
	}
	if f.Changed("socket") {
		return usagef("--socket and --host name two ways to reach dlbd: give one")
	}
	if a.remote.TokenFile == "" {
		return usagef("--host needs --token-file (or DLB_TOKEN_FILE): dlbd's TCP admin listener serves holders of its token only")
	}
	if a.cl != nil {
		return nil
	}
	c, err := a.env.newRemote(a.remote, a.timeout)
	if err != nil {
		return usagef("--host %s: %v", a.remote.Address, err)
	}
	a.cl = c
	return nil
}
