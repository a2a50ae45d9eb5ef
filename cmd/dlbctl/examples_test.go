package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/client"
	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/server"
)

// The repository's files the tests read, absolute: TestExamplesRun
// changes the working directory.
var (
	readmePath   = repoFile("README.md")
	packagedCfg  = repoFile("packaging/etc/dlb.cfg.example")
	packagedYAML = repoFile("packaging/etc/dlb.yaml.example")
)

func repoFile(name string) string {
	p, err := filepath.Abs(filepath.Join("../..", name))
	if err != nil {
		panic(err)
	}
	return p
}

// example is a command line shown to operators, and where.
type example struct {
	where, line string
}

// helpExamples are the command lines of every command's --help examples.
func helpExamples() []example {
	var out []example
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, l := range strings.Split(c.Example, "\n") {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, "dlbctl ") {
				out = append(out, example{c.CommandPath() + " --help", l})
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk((&app{env: osEnv()}).newRoot())
	return out
}

// codeBlock is a fenced code block of README.md: the number of its first
// line (from 1), its language and its lines.
type codeBlock struct {
	start int
	lang  string
	lines []string
}

// readmeBlocks are README.md's code blocks.
func readmeBlocks(t *testing.T) []codeBlock {
	t.Helper()
	b, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []codeBlock
	var cur *codeBlock
	for i, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "```") && cur == nil:
			cur = &codeBlock{start: i + 2, lang: strings.TrimPrefix(l, "```")}
		case strings.HasPrefix(l, "```"):
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, l)
		}
	}
	if cur != nil {
		t.Fatalf("README.md: the code block of line %d is not closed", cur.start-1)
	}
	return blocks
}

// diffLine is a change as "dlbctl apply --diff" prints it: a sign and a
// command.
var diffLine = regexp.MustCompile(`^[-+~] ([a-z]+) `)

// readmeExamples are the command lines of README.md's code blocks: those
// that begin with "dlbctl" (after a "$ " prompt, if any), and the changes
// shown as "apply --diff" prints them, which are commands too.
func readmeExamples(t *testing.T) []example {
	t.Helper()
	var out []example
	for _, b := range readmeBlocks(t) {
		diff := slices.ContainsFunc(b.lines, func(l string) bool { return strings.Contains(l, "dlbctl apply") })
		for i, l := range b.lines {
			where := fmt.Sprintf("README.md:%d", b.start+i)
			l = strings.TrimPrefix(l, "$ ")
			switch {
			case strings.HasPrefix(l, "dlbctl "):
				out = append(out, example{where, l})
			case diff && diffLine.MatchString(l):
				out = append(out, example{where + " (a change apply --diff prints)", "dlbctl " + l[2:]})
			}
		}
	}
	return out
}

// inputFlags name files an example reads; "file load" reads its argument.
var inputFlags = []string{"-f", "--secret-file", "--token-file", "--ca-file", "--password-file"}

// exampleRun runs examples in-process, each in a directory of its own
// where the files it reads exist.
type exampleRun struct {
	t    *testing.T
	sock string
	eng  *fakeEngine
}

func newExampleRun(t *testing.T) *exampleRun {
	t.Helper()
	// The advisor the examples report on.
	eng := &fakeEngine{advisors: []api.AdvisorReport{{Name: "http", Cluster: "10.0.0.100", Port: 80}}}
	mux := http.NewServeMux()
	mux.Handle(api.PathTrace, server.Handler(&traceEngine{packets: tracePackets(t)}, nil))
	mux.Handle(api.PathServerCheck, server.New(noEngine{}, server.Options{Logger: slog.New(slog.DiscardHandler), ServerChecker: &fakeChecker{report: api.ServerCheckReport{OK: true,
		Checks: []api.ServerCheck{{Name: "arp-server", Result: "pass"}}}}}))
	mux.Handle("/", eng)
	return &exampleRun{t: t, sock: serve(t, mux), eng: eng}
}

// local maps a path of an example into dir: /etc/dlb/x becomes
// dir/etc/dlb/x, ~/x dir/home/x, and a relative path x (the working
// directory is dir) dir/x.
func local(dir, p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		return filepath.Join(dir, "home", rest)
	}
	return filepath.Join(dir, p)
}

// input writes the file an example reads at path: a configuration file
// of the kind its name says (the package's examples) or a secret (the
// remote client is the test's: a token or CA file is not read).
func (r *exampleRun) input(path string) {
	r.t.Helper()
	var data []byte
	var err error
	switch {
	case strings.HasSuffix(path, ".cfg"):
		data, err = os.ReadFile(packagedCfg)
	case strings.HasSuffix(path, ".yaml"), strings.HasSuffix(path, ".json"):
		data, err = os.ReadFile(packagedYAML)
	default:
		data = []byte("0123456789abcdef0123456789abcdef\n")
	}
	if err == nil {
		err = os.MkdirAll(filepath.Dir(path), 0o700)
	}
	if err == nil {
		err = os.WriteFile(path, data, 0o600)
	}
	if err != nil {
		r.t.Fatal(err)
	}
}

// run runs an example's command line, its parts joined by "|" as a shell
// pipes them (a "> FILE" redirection drops the output), and returns the
// exit code and the standard error of the first part that failed.
func (r *exampleRun) run(ex example) (int, string) {
	r.t.Helper()
	words, err := splitWords(ex.line)
	if err != nil {
		r.t.Fatalf("%s: %q: %v", ex.where, ex.line, err)
	}
	dir := r.t.TempDir()
	var stdin string
	for part := range splitPipes(words) {
		if part[0] != "dlbctl" {
			r.t.Fatalf("%s: %q: a part of the pipe is not dlbctl", ex.where, ex.line)
		}
		args := slices.Clone(part[1:])
		for i, w := range args {
			if strings.HasPrefix(w, "/") || strings.HasPrefix(w, "~/") {
				// Its directory exists, as on a host.
				args[i] = local(dir, w)
				if err := os.MkdirAll(filepath.Dir(args[i]), 0o700); err != nil {
					r.t.Fatal(err)
				}
			}
			if i > 0 && (slices.Contains(inputFlags, args[i-1]) || args[i-1] == "load" && i > 1 && args[i-2] == "file") && args[i] != "-" {
				if !filepath.IsAbs(args[i]) {
					args[i] = local(dir, args[i])
				}
				r.input(args[i])
			}
		}
		if i := slices.Index(args, ">"); i >= 0 {
			args = args[:i]
		}
		if len(args) > 0 && args[0] == "backend" {
			// It changes the host it runs on: parsed, not run.
			if err := parseOnly(args); err != nil {
				return exitUsage, err.Error()
			}
			continue
		}
		code, stdout, stderr := r.dlbctl(dir, stdin, args)
		if code != exitOK {
			return code, stderr
		}
		stdin = stdout
	}
	return exitOK, ""
}

// splitPipes yields the words of each part of a pipe.
func splitPipes(words []string) func(func([]string) bool) {
	return func(yield func([]string) bool) {
		for len(words) > 0 {
			i := slices.Index(words, "|")
			if i < 0 {
				i = len(words)
			}
			if !yield(words[:i]) || i == len(words) {
				return
			}
			words = words[i+1:]
		}
	}
}

// dlbctl runs dlbctl in dir: --socket and --host, whatever they name,
// reach the test's API.
func (r *exampleRun) dlbctl(dir, stdin string, args []string) (int, string, string) {
	r.t.Chdir(dir)
	var out, errb bytes.Buffer
	e := &env{
		stdin:     strings.NewReader(stdin),
		stdout:    &out,
		stderr:    &errb,
		getenv:    func(k string) string { return map[string]string{"DLB_SOCKET": r.sock}[k] },
		newClient: func(string, time.Duration) dlbClient { return client.NewTimeout(r.sock, 10*time.Second) },
		newRemote: func(client.Remote, time.Duration) (dlbClient, error) {
			return client.NewTimeout(r.sock, 10*time.Second), nil
		},
		now:      func() time.Time { return testTime },
		resolver: testHosts,
	}
	code := run(e, args)
	return code, out.String(), errb.String()
}

// parseOnly checks a command line as cobra would before running it: the
// command exists, its flags parse, its arguments pass its check.
func parseOnly(args []string) error {
	root := (&app{env: osEnv()}).newRoot()
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return err
	}
	return cmd.ValidateArgs(cmd.Flags().Args())
}

// TestExamplesRun: every command line dlbctl shows operators, in its
// --help examples and in README.md's code blocks (the changes "apply
// --diff" prints there included), runs as shown: accepted, sent to dlbd,
// exit 0, with the files it reads in place (/etc/dlb/... and ~/... under
// a directory of the test). "backend setup" changes the host it runs on:
// it is parsed, not run.
func TestExamplesRun(t *testing.T) {
	r := newExampleRun(t)
	examples := append(helpExamples(), readmeExamples(t)...)
	// The run must be able to fail: a flag, a command and a flag of the
	// command only parsed, each misspelt.
	for _, bad := range []example{{"typo", "dlbctl port add 10.0.0.100@80 --protocolx tcp"}, {"typo", "dlbctl sever report"},
		{"typo", "dlbctl backend setup 10.0.0.100 --interfac eth0"}} {
		if code, _ := r.run(bad); code == exitOK {
			t.Fatalf("%q ran: the check cannot fail", bad.line)
		}
	}
	seen := map[string]bool{}
	for _, ex := range examples {
		if seen[ex.line] {
			continue
		}
		seen[ex.line] = true
		if code, stderr := r.run(ex); code != exitOK {
			t.Errorf("%s: %s\nexit %d: %s", ex.where, ex.line, code, stderr)
		}
	}
	// What the API received: the examples reached it, operations among
	// them.
	if len(seen) < 100 || len(r.eng.sent()) < 50 {
		t.Errorf("%d distinct examples sent %d batches: want at least 100 and 50", len(seen), len(r.eng.sent()))
	}
	t.Logf("%d distinct examples (%d help, %d README), %d batches of operations sent", len(seen), len(helpExamples()),
		len(readmeExamples(t)), len(r.eng.sent()))
}

// inlineCommand is a command README.md's text names in backticks.
var inlineCommand = regexp.MustCompile("`(dlbctl [^`]*)`")

// placeholder is a word that stands for a value (FILE, VIP@PORT).
var placeholder = regexp.MustCompile(`\b[A-Z]{2,}\b`)

// TestREADMENamesRealCommands: every "dlbctl ..." README.md's text names
// in backticks is a command dlbctl has, with flags it has. One that is a
// use, with arguments and no placeholders (FILE, VIP@PORT), runs as
// TestExamplesRun runs examples.
func TestREADMENamesRealCommands(t *testing.T) {
	b, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	r := newExampleRun(t)
	ran, named := 0, 0
	for _, m := range inlineCommand.FindAllStringSubmatch(string(b), -1) {
		ex := example{"README.md's text", m[1]}
		if use(m[1]) {
			if code, stderr := r.run(ex); code != exitOK {
				t.Errorf("README.md names `%s`: exit %d: %s", m[1], code, stderr)
			}
			ran++
			continue
		}
		for part := range splitPipes(strings.Fields(m[1])) {
			if err := names(part[1:]); err != nil {
				t.Errorf("README.md names `%s`: %v", m[1], err)
			}
		}
		named++
	}
	// The check can fail.
	for _, bad := range []string{"dlbctl manager quiet", "dlbctl apply --dif", "dlbctl sever"} {
		if err := names(strings.Fields(bad)[1:]); err == nil {
			t.Fatalf("%q passed: the check cannot fail", bad)
		}
	}
	t.Logf("README.md's text names %d uses (run) and %d commands", ran, named)
	if ran < 5 || named < 10 {
		t.Errorf("README.md's text names %d uses and %d commands: want at least 5 and 10", ran, named)
	}
}

// use tells a use of a command ("dlbctl server report 10.0.0.100@80")
// from a command named ("dlbctl file load", "dlbctl file save FILE").
func use(line string) bool {
	if placeholder.MatchString(line) {
		return false
	}
	words := strings.Fields(line)
	cmd, rest, err := (&app{env: osEnv()}).newRoot().Find(words[1:])
	if err != nil || cmd.HasSubCommands() || len(rest) == 0 {
		return false
	}
	return !strings.HasPrefix(rest[len(rest)-1], "-") || rest[len(rest)-1] == "-"
}

// names checks that args name a command and flags of it (the last flag's
// value may be left out: "apply -f").
func names(args []string) error {
	if i := slices.Index(args, ">"); i >= 0 {
		args = args[:i]
	}
	root := (&app{env: osEnv()}).newRoot()
	// cobra adds these when it runs.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	for _, w := range rest {
		name, ok := strings.CutPrefix(w, "--")
		if !ok {
			if name, ok = strings.CutPrefix(w, "-"); !ok || name == "" {
				if cmd.HasSubCommands() {
					return fmt.Errorf("%s has no command %q", cmd.CommandPath(), w)
				}
				continue
			}
		}
		name, _, _ = strings.Cut(name, "=")
		if !hasFlag(cmd.Flags(), name) && !hasFlag(cmd.InheritedFlags(), name) && name != "help" {
			return fmt.Errorf("%s has no flag %s", cmd.CommandPath(), w)
		}
	}
	return nil
}

func hasFlag(f *pflag.FlagSet, name string) bool {
	return f.Lookup(name) != nil || len(name) == 1 && f.ShorthandLookup(name) != nil
}

// TestREADMEConfigurationFiles: README.md's configuration files (its
// yaml blocks of dlbd's keys) are files dlbd reads.
func TestREADMEConfigurationFiles(t *testing.T) {
	top := regexp.MustCompile(`^(executor|manager|clusters|advisors|metric|ha|bgp):`)
	n := 0
	for _, b := range readmeBlocks(t) {
		if b.lang != "yaml" || len(b.lines) == 0 || !top.MatchString(b.lines[0]) {
			continue
		}
		n++
		if _, err := config.ReadFile([]byte(strings.Join(b.lines, "\n")), config.Options{}); err != nil {
			t.Errorf("README.md:%d: %v", b.start, err)
		}
	}
	if n < 2 {
		t.Errorf("%d configuration files in README.md: want at least 2", n)
	}
}
