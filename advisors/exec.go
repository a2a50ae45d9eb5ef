package advisors

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dlbproject/dlb/pkg/runner"
)

// ExecMode selects how a custom (exec) advisor's program reports, as in
// IBM's custom advisors.
type ExecMode int

const (
	// ExecNormal: the framework times the program; exit status 0 is up,
	// with Load the program's run time, anything else is down.
	ExecNormal ExecMode = iota
	// ExecReplace: the program prints the load itself, an integer number
	// of milliseconds (ideally 10-1000), on its first stdout line and
	// exits 0; "-1" means down.
	ExecReplace
)

// String returns "normal" or "replace".
func (m ExecMode) String() string {
	switch m {
	case ExecNormal:
		return "normal"
	case ExecReplace:
		return "replace"
	}
	return "ExecMode(" + strconv.Itoa(int(m)) + ")"
}

// Exec is a custom advisor: it runs Program with Args (directly, no shell)
// once per probe. It is not in the registry (New("exec") fails), because
// the program is the advisor's configuration rather than the server's:
// build one with a struct literal, Exec{Program: "/usr/lib/dlb/check",
// Mode: ExecReplace}. Both Exec and *Exec implement Advisor; Name is
// "exec" and DefaultPort 0 (the Target's Port is passed on as is).
//
// The program inherits the process's environment plus:
//
//	DLB_ADVISOR_ADDRESS     the server address (Target.Address)
//	DLB_ADVISOR_PORT        the port (Target.Port)
//	DLB_ADVISOR_TIMEOUT_MS  the time it has: connect + receive timeout,
//	                        shortened by the context's deadline
//	DLB_ADVISOR_HOST        Target.Host, if set
//	DLB_ADVISOR_REQUEST     Target.Request, if set
//	DLB_ADVISOR_RESPONSE    Target.Response, if set
//	DLB_ADVISOR_SOURCE      the address probes leave from (see
//	                        Target.Source), if set: a program that opens
//	                        sockets should bind to it
//
// It runs with package runner: its stdin is /dev/null; at most 4 KiB of
// stdout and of stderr are kept. It runs in its own process group, which
// is killed (SIGKILL) when the time is up or the context is cancelled; the
// probe is then down with reason "timeout after 4s" (or "canceled"). The
// group is also killed when the program exits, so that nothing it started
// outlives the probe.
//
// Down reasons in both modes: "no program", "cannot run program: ...",
// "exit status N" or "exit status N: <first line of stderr>", "killed by
// signal S". In replace mode also "no load on stdout", "bad load \"x\""
// (not an integer, or negative other than -1) and "program reported
// down" (-1).
type Exec struct {
	// Program is the path of the program to run (looked up in PATH if it
	// has no slash).
	Program string
	// Args are its arguments.
	Args []string
	// Mode selects normal or replace mode.
	Mode ExecMode
}

// Name implements Advisor: "exec".
func (Exec) Name() string { return "exec" }

// DefaultPort implements Advisor: none.
func (Exec) DefaultPort() uint16 { return 0 }

// Probe implements Advisor.
func (e Exec) Probe(ctx context.Context, t Target) Result {
	if e.Program == "" {
		return Down("no program")
	}
	limit := exchangeBudget(ctx, t)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DLB_ADVISOR_") { // ours alone
			env = append(env, kv)
		}
	}
	env = append(env,
		"DLB_ADVISOR_ADDRESS="+addrString(t),
		"DLB_ADVISOR_PORT="+strconv.Itoa(int(t.Port)),
		"DLB_ADVISOR_TIMEOUT_MS="+strconv.FormatInt(limit.Milliseconds(), 10),
	)
	src := ""
	if a := t.SourceAddr(); a.IsValid() {
		src = a.String()
	}
	for _, kv := range [][2]string{{"HOST", t.Host}, {"REQUEST", t.Request}, {"RESPONSE", t.Response}, {"SOURCE", src}} {
		if kv[1] != "" {
			env = append(env, "DLB_ADVISOR_"+kv[0]+"="+kv[1])
		}
	}
	r := runner.Run(ctx, runner.Cmd{Path: e.Program, Args: e.Args, Env: env, Timeout: limit, KillGroupOnExit: true})
	switch {
	case r.Canceled:
		return Down("canceled")
	case r.TimedOut:
		return Down("timeout after %s", fmtDur(limit))
	case !r.Started():
		res := Down("cannot run program: %s", innerError(r.Err))
		res.Local = true // missing, not executable, or no process to run it in: this host's fault
		return res
	case r.Err != nil:
		if sig, ok := r.Signaled(); ok {
			return Down("killed by signal %s", signalName(sig))
		}
		reason := fmt.Sprintf("exit status %d", r.ExitCode())
		if line := firstLine(r.Stderr); line != "" {
			reason += ": " + printable(line, 120)
		}
		return Down("%s", reason)
	}
	if e.Mode != ExecReplace {
		return Result{Up: true, Load: r.Elapsed}
	}
	line := strings.TrimSpace(firstLine(r.Stdout))
	if line == "" {
		return Down("no load on stdout")
	}
	n, perr := strconv.ParseInt(line, 10, 64)
	switch {
	case perr == nil && n == -1:
		return Down("program reported down")
	case perr != nil || n < 0 || n > int64(time.Duration(1<<62)/time.Millisecond):
		return Down("bad load %s", quoteReply(line))
	}
	return Result{Up: true, Load: time.Duration(n) * time.Millisecond}
}

// addrString renders t.Address, or "" when it is unset.
func addrString(t Target) string {
	if !t.Address.IsValid() {
		return ""
	}
	return t.Address.String()
}

// signalName names a signal the way kill -l does ("SIGKILL").
func signalName(s syscall.Signal) string {
	names := map[syscall.Signal]string{
		syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE",
		syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGKILL: "SIGKILL",
		syscall.SIGPIPE: "SIGPIPE", syscall.SIGQUIT: "SIGQUIT", syscall.SIGSEGV: "SIGSEGV",
		syscall.SIGTERM: "SIGTERM",
	}
	if n, ok := names[s]; ok {
		return n
	}
	return "signal " + strconv.Itoa(int(s))
}

// firstLine returns b's first line, without its line end.
func firstLine(b []byte) string {
	s := string(b)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimRight(s, "\r")
}
