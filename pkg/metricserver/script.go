package metricserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlbproject/dlb/pkg/runner"
)

const (
	// DefaultScriptTimeout is how long a metric script may run before it
	// is killed.
	DefaultScriptTimeout = 2 * time.Second
	// MaxScriptOutput caps what is read of a script's standard output, in
	// bytes; a script that prints more has no value.
	MaxScriptOutput = 4096
	// maxParallelScripts bounds how many scripts run at once.
	maxParallelScripts = 8
)

// script is one metric script found in the scripts directory.
type script struct {
	name string // metric name: the file name
	path string
	skip string // non-empty: not run, for this reason
}

// listScripts returns the metric scripts in dir: every regular file (or
// symbolic link to one) with an execute bit, named after its metric. Hidden
// files and directories are ignored. A file whose name is not a valid
// metric name, or that group or others may write, is listed with a reason
// and not run: anyone who can change it could run code as the agent. For
// the same reason a directory that group or others may write (without the
// sticky bit) is refused as a whole.
func listScripts(dir string) ([]script, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("reading scripts directory: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 && fi.Mode()&os.ModeSticky == 0 {
		return nil, fmt.Errorf("scripts directory %s has mode %04o: group or others could add scripts; run: chmod go-w %s", dir, perm, dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading scripts directory: %w", err)
	}
	var out []script
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		path := filepath.Join(dir, name)
		fi, err := os.Stat(path)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			continue
		}
		s := script{name: name, path: path}
		switch {
		case !ValidMetricName(name):
			s.skip = "file name is not a valid metric name"
		case fi.Mode().Perm()&0o022 != 0:
			s.skip = fmt.Sprintf("not run: mode %04o lets group or others write it", fi.Mode().Perm())
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// scriptResult is the outcome of one script run.
type scriptResult struct {
	name  string
	value float64
	err   error
}

// runScripts runs the scripts, at most maxParallelScripts at once, each
// with its own timeout, and returns one result per script in order.
func runScripts(ctx context.Context, scripts []script, timeout time.Duration) []scriptResult {
	res := make([]scriptResult, len(scripts))
	sem := make(chan struct{}, maxParallelScripts)
	var wg sync.WaitGroup
	for i, s := range scripts {
		res[i].name = s.name
		if s.skip != "" {
			res[i].err = errors.New(s.skip)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			res[i].value, res[i].err = runScript(ctx, s.path, timeout)
		}()
	}
	wg.Wait()
	return res
}

// runScript runs one metric script and parses its output.
//
// The script runs with package runner, in its directory, with the agent's
// environment: in its own process group, killed whole (SIGKILL) when the
// timeout expires or the script exits, so a shell script's children die
// with it; standard input from /dev/null; standard output capped at
// MaxScriptOutput bytes.
//
// The output, without surrounding white space, must be one decimal number,
// optionally followed by '%'. The value is clamped to [0, 100]: 250 is
// reported as 100 and -3 as 0, because a script's scale is the operator's
// business and an overloaded server should still read as fully loaded. An
// output that is not a number (or is NaN or infinite), an empty output, a
// non-zero exit status and a timeout are errors: the metric is reported as
// missing with the reason, never as zero.
func runScript(ctx context.Context, path string, timeout time.Duration) (float64, error) {
	r := runner.Run(ctx, runner.Cmd{Path: path, Dir: filepath.Dir(path), Timeout: timeout,
		MaxOutput: MaxScriptOutput, KillGroupOnExit: true})
	var exit *exec.ExitError
	switch {
	case r.TimedOut:
		return 0, fmt.Errorf("killed after the %s timeout", timeout)
	case r.Canceled:
		return 0, fmt.Errorf("running script: %w", ctx.Err())
	case errors.As(r.Err, &exit):
		return 0, fmt.Errorf("script failed: %s", exit.ProcessState)
	case r.Err != nil:
		return 0, fmt.Errorf("running script: %w", r.Err)
	case r.Truncated:
		return 0, fmt.Errorf("output exceeds %d bytes", MaxScriptOutput)
	}
	return parseScriptOutput(string(r.Stdout))
}

// parseScriptOutput parses and clamps a script's output; see runScript.
func parseScriptOutput(s string) (float64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("empty output")
	}
	num := strings.TrimSpace(strings.TrimSuffix(s, "%"))
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("output %q is not a number", cut(s, 32))
	}
	c, ok := clamp(v)
	if !ok {
		return 0, fmt.Errorf("output %q is not a finite number", cut(s, 32))
	}
	return c, nil
}
