package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/client"
)

// defaultFinTimeout is dlbd's default fintimeout (IBM's too); a saved
// script leaves it out, so that the script reads as the operator's
// choices.
const defaultFinTimeout = 60

func (a *app) fileCmd() *cobra.Command {
	save := &cobra.Command{
		Use:   "save FILE [--force]",
		Short: "Save the configuration as a script of dlbctl commands",
		Long: `Save dlbd's configuration as a script of dlbctl commands that recreates
it with "dlbctl file load". The file is replaced atomically; an existing
FILE is kept unless --force is given. FILE "-" writes to standard output.`,
		Example: `  dlbctl file save /etc/dlb/dlb.cfg
  dlbctl file save /etc/dlb/dlb.cfg --force
  dlbctl file save -`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("file save needs one FILE, got %d arguments", len(args))
			}
			return nil
		},
		RunE: a.runE(a.fileSave),
	}
	save.Flags().Bool("force", false, "overwrite FILE if it exists")

	load := &cobra.Command{
		Use:   "load FILE",
		Short: "Apply a script of dlbctl commands as one batch: all or nothing",
		Long: `Apply a script of dlbctl commands, such as "dlbctl file save" writes, as
one batch: dlbd applies all of it or, if it refuses any line, none of it.

The script has one command per line, without "dlbctl" (a leading "dlbctl"
is allowed). Blank lines and text after '#' are ignored; words may be quoted
with '...' or "...". Only commands that change the configuration may
appear: reports, file, version and completion are refused. The script is
checked completely before anything is sent; an error names FILE:LINE.

The script applies on top of the running configuration, like dscontrol's
"file appendload": what it adds must not exist yet.`,
		Example: `  dlbctl file load /etc/dlb/dlb.cfg`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("file load needs one FILE, got %d arguments", len(args))
			}
			return nil
		},
		RunE: a.runE(a.fileLoad),
	}

	return a.noun("file", "Save the configuration as a script, and load such scripts",
		`  dlbctl file save /etc/dlb/dlb.cfg
  dlbctl file load /etc/dlb/dlb.cfg`,
		save, load)
}

func (a *app) fileSave(cmd *cobra.Command, args []string) error {
	path := args[0]
	force, _ := cmd.Flags().GetBool("force")
	toStdout := path == "-"
	// Checked before asking dlbd, so that a mistyped name costs nothing;
	// writeFileAtomic checks again without a race.
	if !toStdout && !force {
		if _, err := os.Lstat(path); err == nil {
			return usagef("%s exists; use --force to overwrite it", path)
		}
	}
	ctx := cmd.Context()
	c := a.client()
	var cfg savedConfig
	var err error
	if cfg.ex, err = c.Executor(ctx); err != nil {
		return err
	}
	if cfg.clusters, err = c.Clusters(ctx, ""); err != nil {
		return err
	}
	if cfg.ports, err = c.Ports(ctx, ""); err != nil {
		return err
	}
	if cfg.servers, err = c.Servers(ctx, ""); err != nil {
		return err
	}
	if cfg.manager, err = c.Manager(ctx); err != nil {
		return err
	}
	if cfg.advisors, err = c.Advisors(ctx); err != nil {
		return err
	}
	if cfg.metrics, err = c.Metrics(ctx); err != nil {
		return err
	}
	cls, ports, servers := cfg.clusters, cfg.ports, cfg.servers
	var buf bytes.Buffer
	writeScript(&buf, a.env.now(), a.socket, cfg)
	if toStdout {
		_, err := a.env.stdout.Write(buf.Bytes())
		return err
	}
	if err := writeFileAtomic(path, buf.Bytes(), force); err != nil {
		return err
	}
	fmt.Fprintf(a.env.stdout, "saved %d clusters, %d ports and %d servers to %s\n", len(cls), len(ports), len(servers), path)
	return nil
}

// savedConfig is what "file save" reads from dlbd.
type savedConfig struct {
	ex       api.ExecutorReport
	clusters []api.ClusterReport
	ports    []api.PortReport
	servers  []api.ServerReport
	manager  api.ManagerReport
	advisors []api.AdvisorReport
	metrics  api.MetricReport
}

// Defaults of dlbd's that a saved script leaves out.
var (
	defaultProportions = []int{50, 50, 0, 0}
	defaultManager     = api.ManagerReport{Interval: 2, Refresh: 2, Smoothing: 1.5, Sensitivity: 5}
)

// defaultSelectionAlgorithm is dlbd's default selectionalgorithm; a saved
// script leaves it out.
const defaultSelectionAlgorithm = "affinity"

// writeScript writes a script of dlbctl commands that recreates the
// configuration the reports describe. Each port follows its cluster and
// each server its port, so that the script reads like the configuration;
// advisors and metrics follow (they need their ports), then the clusters'
// proportions (starting an advisor or adding a metric may raise them),
// and the executor and the manager start last, once everything they work
// on is defined. A port's crossport names another port of its cluster,
// so it is set once all the cluster's ports exist.
func writeScript(w io.Writer, when time.Time, socket string, c savedConfig) {
	fmt.Fprintf(w, "# dlb configuration saved by \"dlbctl file save\" from %s\n", socket)
	fmt.Fprintf(w, "# on %s.\n", when.Format(time.RFC3339))
	fmt.Fprintf(w, "# \"dlbctl file load FILE\" applies it as one batch: all or nothing.\n")

	ex := c.ex
	var exLines []string
	// An address sets the value of its family, so the IPv4 and the IPv6
	// values take a line each.
	for _, kv := range [][2]string{{"nfa", ex.NFA}, {"nfa", ex.NFA6},
		{"clientgateway", ex.ClientGateway}, {"clientgateway", ex.ClientGateway6}} {
		if kv[1] != "" {
			exLines = append(exLines, "executor set "+kv[0]+" "+quote(kv[1]))
		}
	}
	if ex.FinTimeout != defaultFinTimeout && ex.FinTimeout != 0 {
		exLines = append(exLines, fmt.Sprintf("executor set fintimeout %d", ex.FinTimeout))
	}
	if len(exLines) > 0 {
		fmt.Fprintf(w, "\n%s\n", strings.Join(exLines, "\n"))
	}

	var quiesced []string
	for _, cl := range c.clusters {
		fmt.Fprintf(w, "\ncluster add %s", quote(cl.Address))
		if cl.Configure {
			fmt.Fprintf(w, " --configure")
		}
		fmt.Fprintln(w)
		var crossports []string
		for _, p := range c.ports {
			if p.Cluster != cl.Address {
				continue
			}
			svc := fmt.Sprintf("%s@%d", p.Cluster, p.Port)
			fmt.Fprintf(w, "port add %s --protocol %s --method %s --staletimeout %d --weightbound %d",
				quote(svc), quote(p.Protocol), quote(p.Method), p.StaleTimeout, p.WeightBound)
			if p.StickyTime != 0 {
				fmt.Fprintf(w, " --stickytime %d", p.StickyTime)
			}
			if p.StickyMask != 0 {
				fmt.Fprintf(w, " --stickymask %d", p.StickyMask)
			}
			if p.SelectionAlgorithm != "" && p.SelectionAlgorithm != defaultSelectionAlgorithm {
				fmt.Fprintf(w, " --selectionalgorithm %s", quote(p.SelectionAlgorithm))
			}
			if p.MaxHalfOpen != 0 {
				fmt.Fprintf(w, " --maxhalfopen %d", p.MaxHalfOpen)
			}
			if p.AllDown != "" && p.AllDown != "refuse" {
				fmt.Fprintf(w, " --alldown %s", quote(p.AllDown))
			}
			fmt.Fprintln(w)
			var down []string
			for _, s := range c.servers {
				if s.Cluster != p.Cluster || s.Port != p.Port {
					continue
				}
				t := quote(svc + "@" + s.Address)
				fmt.Fprintf(w, "server add %s --weight %d", t, s.Weight)
				if s.FixedWeight {
					fmt.Fprintf(w, " --fixedweight yes")
				}
				if s.AdvisorRequest != "" {
					fmt.Fprintf(w, " --advisorrequest %s", quote(s.AdvisorRequest))
				}
				if s.AdvisorResponse != "" {
					fmt.Fprintf(w, " --advisorresponse %s", quote(s.AdvisorResponse))
				}
				if s.MapPort != 0 {
					fmt.Fprintf(w, " --mapport %d", s.MapPort)
				}
				if s.ReturnAddress != "" {
					fmt.Fprintf(w, " --returnaddress %s", quote(s.ReturnAddress))
				}
				if s.Router != "" {
					fmt.Fprintf(w, " --router %s", quote(s.Router))
				}
				fmt.Fprintln(w)
				switch s.State {
				case api.StateDown:
					down = append(down, t)
				case api.StateQuiesced:
					quiesced = append(quiesced, t)
				}
			}
			for _, t := range down {
				fmt.Fprintf(w, "server down %s\n", t)
			}
			if p.CrossPort != 0 {
				crossports = append(crossports, fmt.Sprintf("port set %s --crossport %d", quote(svc), p.CrossPort))
			}
		}
		for _, l := range crossports {
			fmt.Fprintln(w, l)
		}
	}

	if len(c.advisors) > 0 {
		fmt.Fprintln(w)
	}
	for _, a := range c.advisors {
		fmt.Fprintf(w, "advisor start %s %s --interval %g --connecttimeout %g --receivetimeout %g --retries %d --rise %d --fall %d",
			quote(a.Name), quote(fmt.Sprintf("%s@%d", a.Cluster, a.Port)), a.Interval, a.ConnectTimeout, a.ReceiveTimeout,
			a.Retries, a.Rise, a.Fall)
		if a.Program != "" {
			fmt.Fprintf(w, " --program %s --mode %s", quote(a.Program), quote(a.Mode))
			for _, arg := range a.Args {
				fmt.Fprintf(w, " --arg %s", quote(arg))
			}
		}
		fmt.Fprintln(w)
	}

	m := c.metrics
	var msLines []string
	if m.Source != "" && m.Source != "dlbmetricd" {
		msLines = append(msLines, "--source "+quote(m.Source))
	}
	if m.Port != 0 && !(m.Port == 10004 && m.Source == "dlbmetricd") && !(m.Port == 9100 && m.Source == "prometheus") {
		msLines = append(msLines, fmt.Sprintf("--port %d", m.Port))
	}
	if m.SecretFile != "" {
		msLines = append(msLines, "--secret-file "+quote(m.SecretFile))
	}
	if m.Path != "" && !(m.Path == "/metrics" && m.Source == "prometheus") {
		msLines = append(msLines, "--path "+quote(m.Path))
	}
	if len(msLines) > 0 {
		fmt.Fprintf(w, "\nmetric set %s\n", strings.Join(msLines, " "))
	}
	for _, mc := range m.Clusters {
		if len(mc.Metrics) > 0 {
			fmt.Fprintf(w, "metric add %s\n", quote(mc.Cluster+"@"+strings.Join(mc.Metrics, "+")))
		}
	}

	// Advisors and metrics raise zero proportions when loaded: pin the
	// saved values after them.
	pin := len(c.advisors) > 0 || len(m.Clusters) > 0
	var props []string
	for _, cl := range c.clusters {
		if len(cl.Proportions) == 4 && (pin || !slices.Equal(cl.Proportions, defaultProportions)) {
			props = append(props, fmt.Sprintf("cluster set %s --proportions %d %d %d %d", quote(cl.Address),
				cl.Proportions[0], cl.Proportions[1], cl.Proportions[2], cl.Proportions[3]))
		}
	}
	if len(props) > 0 {
		fmt.Fprintf(w, "\n%s\n", strings.Join(props, "\n"))
	}
	for i, t := range quiesced {
		if i == 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "manager quiesce %s\n", t)
	}

	mr := c.manager
	if mr.Interval != 0 && (mr.Interval != defaultManager.Interval || mr.Refresh != defaultManager.Refresh ||
		mr.Smoothing != defaultManager.Smoothing || mr.Sensitivity != defaultManager.Sensitivity) {
		fmt.Fprintf(w, "\nmanager set interval %g refresh %d smoothing %g sensitivity %g\n",
			mr.Interval, mr.Refresh, mr.Smoothing, mr.Sensitivity)
	}
	if ex.Started {
		fmt.Fprintf(w, "\nexecutor start --interface %s --xdp-mode %s\n", quote(ex.Interface), quote(ex.XDPMode))
	}
	if mr.Started {
		fmt.Fprintf(w, "manager start\n")
	}
}

// writeFileAtomic writes data to path through a temporary file in the
// same directory, so that a reader (or a crash) never sees half a file.
// Without force an existing path is kept.
func writeFileAtomic(path string, data []byte, force bool) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("creating %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return fmt.Errorf("setting the mode of %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if force {
		if err := os.Rename(tmp, path); err != nil {
			return fmt.Errorf("replacing %s: %w", path, err)
		}
	} else {
		// A hard link creates path only if it does not exist, which a
		// rename cannot promise.
		if err := os.Link(tmp, path); err != nil {
			if errors.Is(err, os.ErrExist) {
				return usagef("%s exists; use --force to overwrite it", path)
			}
			return fmt.Errorf("creating %s: %w", path, err)
		}
		os.Remove(tmp)
	}
	// Make the new name durable too; failing here loses nothing written.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// quote quotes s for splitWords if it needs it.
func quote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\r\n'\"\\#") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}

// splitWords splits a script line into words like a (much) simpler shell:
// blanks separate words, '...' quotes literally, "..." quotes with \" and
// \\ escapes, a backslash outside quotes escapes the next character, and
// '#' at the start of a word begins a comment.
func splitWords(line string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '#' && !inWord:
			return words, nil
		case c == '\'':
			inWord = true
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("unterminated ' quote")
			}
			cur.WriteString(line[i+1 : i+1+j])
			i += j + 1
		case c == '"':
			inWord = true
			closed := false
			for i++; i < len(line); i++ {
				if line[i] == '"' {
					closed = true
					break
				}
				if line[i] == '\\' && i+1 < len(line) && (line[i+1] == '"' || line[i+1] == '\\') {
					i++
				}
				cur.WriteByte(line[i])
			}
			if !closed {
				return nil, errors.New(`unterminated " quote`)
			}
		case c == '\\':
			if i+1 == len(line) {
				return nil, errors.New("backslash at the end of the line (lines cannot be continued)")
			}
			inWord = true
			i++
			cur.WriteByte(line[i])
		default:
			inWord = true
			cur.WriteByte(c)
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

func (a *app) fileLoad(cmd *cobra.Command, args []string) error {
	path := args[0]
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading script: %w", err)
	}
	ops, lines, err := a.parseScript(path, string(data))
	if err != nil {
		return err
	}
	if len(ops) == 0 {
		fmt.Fprintf(a.env.stdout, "%s: nothing to apply\n", path)
		return nil
	}
	res, err := a.client().Apply(cmd.Context(), ops...)
	if err != nil {
		var re *client.RefusedError
		if errors.As(err, &re) {
			if i := re.API.Op; i >= 0 && i < len(lines) {
				return fmt.Errorf("%s:%d: %w (nothing was applied)", path, lines[i], err)
			}
			return fmt.Errorf("%s: %w (nothing was applied)", path, err)
		}
		return err
	}
	fmt.Fprintf(a.env.stdout, "%s: applied %d operations\n", path, res.Applied)
	return nil
}

// parseScript turns a script into the batch of operations it stands for,
// and the line number of each operation. Each line runs through a fresh
// command tree in collect mode, so that it is parsed exactly as on the
// command line and a flag set on one line cannot leak into the next.
func (a *app) parseScript(path, script string) ([]api.Op, []int, error) {
	var ops []api.Op
	var lines []int
	lineErr := func(n int, help string, err error) error {
		return &usageError{err: fmt.Errorf("%s:%d: %w", path, n, err), help: help}
	}
	for i, text := range strings.Split(script, "\n") {
		n := i + 1
		words, err := splitWords(text)
		if err != nil {
			return nil, nil, lineErr(n, "-", err)
		}
		if len(words) > 0 && words[0] == "dlbctl" {
			words = words[1:]
		}
		if len(words) == 0 {
			continue
		}
		la := &app{env: a.env, collect: &ops}
		root := la.newRoot()
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		root.SetArgs(words)
		// Cobra adds help and completion only when it executes; add them
		// now so that Find sees them and they are refused like reports.
		root.InitDefaultHelpCmd()
		root.InitDefaultCompletionCmd()
		c, _, err := root.Find(words)
		if err != nil {
			return nil, nil, lineErr(n, "dlbctl", err)
		}
		name := cmdName(c)
		// A noun (executor, server...) is run anyway: it names the
		// unknown verb, which says more than refusing the noun would.
		if c.Annotations[annotOp] != "true" && !c.HasSubCommands() {
			return nil, nil, lineErr(n, "-", fmt.Errorf("%q cannot be used in a script: only commands that change the configuration can", name))
		}
		before := len(ops)
		if _, err := root.ExecuteC(); err != nil {
			return nil, nil, lineErr(n, c.CommandPath(), err)
		}
		if len(ops) != before+1 {
			// A noun without a verb, or --help: cobra printed help
			// (discarded) instead of running a command.
			return nil, nil, lineErr(n, c.CommandPath(), fmt.Errorf("%q is not a complete command that changes the configuration", strings.Join(words, " ")))
		}
		lines = append(lines, n)
	}
	return ops, lines, nil
}
