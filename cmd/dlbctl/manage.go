package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dlbproject/dlb/pkg/api"
)

// keywordArgs parses IBM-style "keyword value" pairs against a list of
// keywords (unique prefixes accepted) and returns keyword → value.
func keywordArgs(cmd *cobra.Command, args []string, keywords []string) (map[string]string, error) {
	if len(args) == 0 || len(args)%2 != 0 {
		return nil, usagef("%s needs KEYWORD VALUE pairs (keywords: %s)", cmdName(cmd), strings.Join(keywords, ", "))
	}
	out := map[string]string{}
	for i := 0; i < len(args); i += 2 {
		var match []string
		for _, kw := range keywords {
			if kw == args[i] {
				match = []string{kw}
				break
			}
			if strings.HasPrefix(kw, args[i]) {
				match = append(match, kw)
			}
		}
		if len(match) != 1 {
			return nil, usagef("unknown or ambiguous keyword %q for %s (want %s)", args[i], cmdName(cmd), strings.Join(keywords, ", "))
		}
		if _, dup := out[match[0]]; dup {
			return nil, usagef("keyword %s given twice", match[0])
		}
		out[match[0]] = args[i+1]
	}
	return out, nil
}

func parseFloatArg(kw, v string) (*float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return nil, usagef("%s: %q is not a number", kw, v)
	}
	return &f, nil
}

func parseIntArg(kw, v string) (*int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return nil, usagef("%s: %q is not an integer", kw, v)
	}
	return &n, nil
}

// yesNo parses IBM's yes/no (and true/false) flag values.
func yesNoFlag(cmd *cobra.Command, name string) (*bool, error) {
	s := stringFlag(cmd, name)
	if s == nil {
		return nil, nil
	}
	switch strings.ToLower(*s) {
	case "yes", "y", "true", "on", "1":
		b := true
		return &b, nil
	case "no", "n", "false", "off", "0":
		b := false
		return &b, nil
	}
	return nil, usagef("--%s: %q is not yes or no", name, *s)
}

var managerKeywords = []string{"interval", "refresh", "sensitivity", "smoothing"}

func (a *app) managerCmd() *cobra.Command {
	simple := func(action, short string) *cobra.Command {
		return a.opCmd(&cobra.Command{
			Use: action, Short: short, Example: "  dlbctl manager " + action, Args: noArgs,
		}, func(*cobra.Command, []string) api.Op {
			return api.Op{Object: api.ObjectManager, Action: action}
		})
	}
	start := simple(api.ActionStart, "Start the manager: weights follow the servers' load")
	stop := simple(api.ActionStop, "Stop the manager: servers keep their configured weights")

	set := a.opCmd(&cobra.Command{
		Use:   "set KEYWORD VALUE [KEYWORD VALUE...]",
		Short: "Set manager parameters (interval, refresh, sensitivity, smoothing)",
		Long: `Set manager parameters, IBM style as keyword-value pairs:

  interval SECONDS     the manager's cycle (default 2)
  refresh CYCLES       cycles between reads of the executor's counters (default 2)
  sensitivity PERCENT  weights are pushed only when a port's total weight
                       changes by more than this (default 5)
  smoothing INDEX      each cycle a weight moves 1/INDEX of the way to its
                       target; higher is steadier (default 1.5)

Unique prefixes of keywords are accepted. Flags (--socket) go before the
first keyword.`,
		Example: `  dlbctl manager set interval 1 smoothing 2
  dlbctl manager set sensitivity 10`,
		Args: func(cmd *cobra.Command, args []string) error {
			_, err := managerSetOp(cmd, args)
			return err
		},
	}, func(cmd *cobra.Command, args []string) api.Op {
		op, _ := managerSetOp(cmd, args)
		return op
	})
	set.Flags().SetInterspersed(false)

	quiesce := func(action, short string) *cobra.Command {
		c := a.opCmd(&cobra.Command{
			Use:   action + " VIP@PORT@ADDR|ADDR",
			Short: short,
			Example: `  dlbctl manager ` + action + ` 10.1.1.5                  # on every port it serves
  dlbctl manager ` + action + ` 10.0.0.100@80@10.1.1.5`,
			Args:              a.quiesceArgs,
			ValidArgsFunction: a.targetCompletion(3, true, false),
		}, func(cmd *cobra.Command, _ []string) api.Op {
			return api.Op{Object: api.ObjectManager, Action: action, Target: a.target, Now: boolFlag(cmd, "now")}
		})
		return c
	}
	q := quiesce(api.ActionQuiesce, "Quiesce servers: no new connections, established ones finish")
	q.Flags().Bool("now", false, "also drop the servers' affinity records, so sticky clients move at once")
	uq := quiesce(api.ActionUnquiesce, "Let quiesced servers take new connections again")

	report := &cobra.Command{
		Use:   "report [VIP@PORT@ADDR]",
		Short: "Report weights and their inputs per port and server (ACTV, NEWC, PORT, SYS)",
		Example: `  dlbctl manager report
  dlbctl manager report 10.0.0.100@80      # one port
  dlbctl manager report @@10.1.1.5 -o json  # one server, on every port it serves`,
		Args:              a.targetArgs(3, targetOpts{optional: true, partial: true}),
		ValidArgsFunction: a.targetCompletion(3, true, false),
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			r, err := a.client().Manager(cmd.Context(), a.target)
			if err != nil {
				return err
			}
			r.Ports = nonNil(r.Ports)
			return a.print(r, func(w io.Writer) { managerTable(w, r) })
		}),
	}
	return a.noun("manager", "Start, stop, set and report the manager; quiesce servers",
		`  dlbctl manager start
  dlbctl manager report`,
		start, stop, set, q, uq, report)
}

func managerSetOp(cmd *cobra.Command, args []string) (api.Op, error) {
	op := api.Op{Object: api.ObjectManager, Action: api.ActionSet}
	kv, err := keywordArgs(cmd, args, managerKeywords)
	if err != nil {
		return op, err
	}
	for kw, v := range kv {
		switch kw {
		case "interval":
			op.Interval, err = parseFloatArg(kw, v)
		case "refresh":
			op.Refresh, err = parseIntArg(kw, v)
		case "sensitivity":
			op.Sensitivity, err = parseFloatArg(kw, v)
		case "smoothing":
			op.Smoothing, err = parseFloatArg(kw, v)
		}
		if err != nil {
			return op, err
		}
	}
	return op, nil
}

// quiesceArgs checks "VIP@PORT@ADDR|ADDR": a server on a port, or on
// every port it serves.
func (a *app) quiesceArgs(cmd *cobra.Command, args []string) error {
	if err := target("VIP@PORT@ADDR or ADDR", false)(cmd, args); err != nil {
		return err
	}
	comps, err := splitTarget(args[0])
	if err != nil {
		return err
	}
	if len(comps) > 1 {
		a.target, err = a.normTarget(cmd.Context(), args[0], 3, false)
		return err
	}
	a.target, err = a.resolveItem(cmd.Context(), "server", args[0], args[0], 0)
	return err
}

// advisorArgs checks "NAME VIP@PORT|PORT"; a PORT alone is the target
// "@PORT" (every cluster).
func (a *app) advisorArgs(cmd *cobra.Command, args []string) error {
	if len(args) != 2 {
		return usagef("%s needs NAME and VIP@PORT or PORT, got %d arguments", cmdName(cmd), len(args))
	}
	if !strings.ContainsAny(args[1], "@:[") {
		a.target = "@" + args[1]
		return nil
	}
	var err error
	a.target, err = a.normTarget(cmd.Context(), args[1], 2, false)
	return err
}

// advisorNames are the advisors "advisor start" takes, for completion
// (the advisors package's registry and exec, which is not in it).
var advisorNames = []string{"cluster", "connect", "dns", "exec", "ftp", "http", "https", "imap", "ldap", "ping", "pop3", "smtp", "ssl"}

func floatFlag(cmd *cobra.Command, name string) *float64 {
	if !cmd.Flags().Changed(name) {
		return nil
	}
	v, _ := cmd.Flags().GetFloat64(name)
	return &v
}

func (a *app) advisorCmd() *cobra.Command {
	flags := func(c *cobra.Command) *cobra.Command {
		f := c.Flags()
		f.Float64("interval", 0, "seconds between probes of a server, jittered (default 5)")
		f.Float64("connecttimeout", 0, "seconds a probe may take to connect (default 2)")
		f.Float64("receivetimeout", 0, "seconds a probe may wait for the reply (default 2)")
		f.Int64("retries", 0, "immediate retries of a failed probe before it counts (default 0)")
		f.Int64("rise", 0, "successes in a row that bring a server up (default 2)")
		f.Int64("fall", 0, "failures in a row that take a server down (default 3)")
		f.String("program", "", "exec advisor: the program to run")
		f.StringArray("arg", nil, "exec advisor: an argument for the program (repeatable)")
		f.String("mode", "", "exec advisor: normal (exit status says up/down) or replace (prints the load)")
		return c
	}
	build := func(action string) func(*cobra.Command, []string) api.Op {
		return func(cmd *cobra.Command, args []string) api.Op {
			name := args[0]
			op := api.Op{Object: api.ObjectAdvisor, Action: action, Advisor: &name, Target: a.target}
			if action == api.ActionStop {
				return op
			}
			op.Interval, op.ConnectTimeout, op.ReceiveTimeout = floatFlag(cmd, "interval"), floatFlag(cmd, "connecttimeout"), floatFlag(cmd, "receivetimeout")
			op.Retries, op.Rise, op.Fall = intFlag(cmd, "retries"), intFlag(cmd, "rise"), intFlag(cmd, "fall")
			op.Program, op.Mode = stringFlag(cmd, "program"), stringFlag(cmd, "mode")
			if cmd.Flags().Changed("arg") {
				op.Args, _ = cmd.Flags().GetStringArray("arg")
			}
			return op
		}
	}
	start := flags(a.opCmd(&cobra.Command{
		Use:   "start NAME VIP@PORT|PORT [flags]",
		Short: "Start an advisor on a port (of one cluster, or of every cluster)",
		Long: `Start an advisor: a probe of the port's protocol against every server of the
port. Advisors: connect, http, https, ssl, dns, ftp, smtp, pop3, imap, ldap,
ping, exec (a custom program) and cluster (a SYN to the cluster address at
the server's MAC, as the executor forwards clients: it finds a server that
lost the cluster address from its loopback; one cluster's MAC port).
A server found down gets no new connections until its advisor sees it up
again; starting an advisor raises a zero port proportion to 1.`,
		Example: `  dlbctl advisor start http 80
  dlbctl advisor start http 10.0.0.100@80 --interval 2 --fall 2 --rise 2
  dlbctl advisor start cluster 10.0.0.100@80
  dlbctl advisor start exec 10.0.0.100@8080 --program /usr/local/bin/check --mode replace`,
		Args:              a.advisorArgs,
		ValidArgsFunction: a.advisorCompletion(false),
	}, build(api.ActionStart)))
	set := flags(a.opCmd(&cobra.Command{
		Use:               "set NAME VIP@PORT|PORT [flags]",
		Short:             "Change a started advisor's settings",
		Example:           `  dlbctl advisor set http 80 --interval 1 --receivetimeout 1`,
		Args:              a.advisorArgs,
		ValidArgsFunction: a.advisorCompletion(true),
	}, build(api.ActionSet)))
	stop := a.opCmd(&cobra.Command{
		Use:               "stop NAME VIP@PORT|PORT",
		Short:             "Stop an advisor",
		Example:           `  dlbctl advisor stop http 80`,
		Args:              a.advisorArgs,
		ValidArgsFunction: a.advisorCompletion(true),
	}, build(api.ActionStop))
	report := &cobra.Command{
		Use:   "report [NAME [VIP@PORT|PORT]]",
		Short: "Report the advisors: per server the last load, state, time in state and last error",
		Long: `Report the advisors: per server the last load, state, time in state and last
error. With NAME, the advisors of that name only; with a port too, the one
started on it (VIP@PORT, or PORT for the one of every cluster's port).`,
		Example: `  dlbctl advisor report
  dlbctl advisor report http 10.0.0.100@80
  dlbctl advisor report -o json`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch len(args) {
			case 0, 1:
				a.target = ""
				return nil
			case 2:
				return a.advisorArgs(cmd, args)
			}
			return usagef("%s takes at most NAME and VIP@PORT or PORT, got %d arguments", cmdName(cmd), len(args))
		},
		ValidArgsFunction: a.advisorCompletion(true),
		RunE: a.runE(func(cmd *cobra.Command, args []string) error {
			r, err := a.client().Advisors(cmd.Context())
			if err != nil {
				return err
			}
			if r, err = selectAdvisors(r, args, a.target); err != nil {
				return err
			}
			r = nonNil(r)
			return a.print(r, func(w io.Writer) { advisorTable(w, r) })
		}),
	}
	return a.noun("advisor", "Start, stop, set and report advisors (protocol probes of the servers)",
		`  dlbctl advisor start http 80
  dlbctl advisor report`,
		start, set, stop, report)
}

// advisorOn is the port an advisor was started on, as a target: VIP@PORT,
// or @PORT for the port of every cluster.
func advisorOn(r api.AdvisorReport) string { return fmt.Sprintf("%s@%d", r.Cluster, r.Port) }

// selectAdvisors keeps the advisors of the name args[0] (when given)
// started on target ("@PORT" or "VIP@PORT", when given); none is an
// error that names those started.
func selectAdvisors(rs []api.AdvisorReport, args []string, target string) ([]api.AdvisorReport, error) {
	if len(args) == 0 {
		return rs, nil
	}
	var out []api.AdvisorReport
	var started []string
	for _, r := range rs {
		on := advisorOn(r)
		started = append(started, r.Name+" "+on)
		if r.Name == args[0] && (target == "" || target == on) {
			out = append(out, r)
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	what := fmt.Sprintf("no advisor %s is started", args[0])
	if target != "" {
		what = fmt.Sprintf("no advisor %s is started on %s", args[0], target)
	}
	if len(started) == 0 {
		return nil, errors.New(what + " (none is)")
	}
	return nil, fmt.Errorf("%s (started: %s)", what, strings.Join(started, ", "))
}

// metricTarget splits VIP@METRIC[+METRIC] into the cluster and the names.
func metricTarget(s string) (string, []string, error) {
	cluster, names, ok := strings.Cut(s, "@")
	if !ok || names == "" {
		return "", nil, usagef("%q does not have the form VIP@METRIC[+METRIC]", s)
	}
	return cluster, strings.Split(names, "+"), nil
}

func (a *app) metricCmd() *cobra.Command {
	addRemove := func(action, short, example string) *cobra.Command {
		return a.opCmd(&cobra.Command{
			Use:     action + " VIP@METRIC[+METRIC]",
			Short:   short,
			Example: example,
			Args: func(cmd *cobra.Command, args []string) error {
				if err := target("VIP@METRIC[+METRIC]", false)(cmd, args); err != nil {
					return err
				}
				_, _, err := metricTarget(args[0])
				return err
			},
		}, func(_ *cobra.Command, args []string) api.Op {
			cluster, names, _ := metricTarget(args[0])
			return api.Op{Object: api.ObjectMetric, Action: action, Target: cluster, Metrics: names}
		})
	}
	add := addRemove(api.ActionAdd, "Have the manager weigh servers by these system metrics",
		`  dlbctl metric add 10.0.0.100@cpuload+memload
  dlbctl metric add @loadavg                  # every cluster`)
	remove := addRemove(api.ActionRemove, "Stop using system metrics",
		`  dlbctl metric remove 10.0.0.100@memload`)
	set := a.opCmd(&cobra.Command{
		Use:   "set [flags]",
		Short: "Set how the manager reaches the servers' load agents",
		Long: `Set how the manager reaches each server's load agent: dlbmetricd (dlb's
agent, authenticated with a shared secret; port 10004) or an existing
Prometheus endpoint such as node_exporter (port 9100, path /metrics), whose
node_cpu_seconds_total, node_memory_* and node_load1 give cpuload, memload
and loadavg.`,
		Example: `  dlbctl metric set --secret-file /etc/dlb/metric.secret
  dlbctl metric set --source prometheus --port 9100`,
		Args: noArgs,
	}, func(cmd *cobra.Command, _ []string) api.Op {
		return api.Op{Object: api.ObjectMetric, Action: api.ActionSet, Source: stringFlag(cmd, "source"),
			MetricPort: intFlag(cmd, "port"), SecretFile: stringFlag(cmd, "secret-file"), Path: stringFlag(cmd, "path")}
	})
	set.Flags().String("source", "", "dlbmetricd or prometheus")
	set.Flags().Int64("port", 0, "the agent's port on each server")
	set.Flags().String("secret-file", "", "file holding the secret shared with dlbmetricd")
	set.Flags().String("path", "", "the Prometheus endpoint's path")
	set.MarkFlagsOneRequired("source", "port", "secret-file", "path")
	report := &cobra.Command{
		Use:     "report",
		Short:   "Report the metric settings and each server's last load report",
		Example: `  dlbctl metric report -o json`,
		Args:    noArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			r, err := a.client().Metrics(cmd.Context())
			if err != nil {
				return err
			}
			r.Clusters, r.Servers = nonNil(r.Clusters), nonNil(r.Servers)
			return a.print(r, func(w io.Writer) { metricTable(w, r) })
		}),
	}
	return a.noun("metric", "Add, remove, set and report system metrics (metric servers)",
		`  dlbctl metric add 10.0.0.100@cpuload
  dlbctl metric report`,
		add, remove, set, report)
}

func managerTable(w io.Writer, r api.ManagerReport) {
	state := "stopped"
	if r.Started {
		state = "started"
	}
	fmt.Fprintf(w, "manager:\t%s (cycle %d)\n", state, r.Cycles)
	fmt.Fprintf(w, "interval:\t%g s, refresh %d, sensitivity %g %%, smoothing %g\n", r.Interval, r.Refresh, r.Sensitivity, r.Smoothing)
	for _, p := range r.Ports {
		alert := ""
		if p.Alert {
			alert = "  ALERT: no server takes new connections"
		}
		fmt.Fprintf(w, "\n%s@%d\tproportions %v, weightbound %d, change %.1f %%, pushed %v%s\n",
			p.Cluster, p.Port, p.Proportions, p.WeightBound, p.Change, p.Pushed, alert)
		if len(p.Servers) == 0 {
			fmt.Fprintln(w, "no servers")
			continue
		}
		fmt.Fprintln(w, "SERVER\tWEIGHT\tNEW\tACTV\tNEWC\tPORT\tSYS\tSTATE\tREASON")
		for _, s := range p.Servers {
			sys := "-"
			if s.SystemLoad >= 0 {
				sys = fmt.Sprintf("%.0f", s.SystemLoad)
			}
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n",
				s.Address, s.Weight, s.NewWeight, s.Active, s.New, s.PortLoad, sys, s.State, s.Reason)
		}
	}
}

func advisorTable(w io.Writer, r []api.AdvisorReport) {
	fmt.Fprintln(w, "ADVISOR\tTARGET\tSERVER\tSTATE\tLOAD_MS\tIN_STATE\tPROBES\tFAILS\tLAST_ERROR")
	for _, a := range r {
		t := advisorOn(a)
		if len(a.Servers) == 0 {
			fmt.Fprintf(w, "%s\t%s\t-\t\t\t\t\t\t\n", a.Name, t)
		}
		for _, s := range a.Servers {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%.0fs\t%d\t%d\t%s\n", a.Name, t, s.Address, s.State, s.LoadMS,
				s.SecondsInState, s.Probes, s.Failures, s.LastError)
		}
	}
}

func metricTable(w io.Writer, r api.MetricReport) {
	fmt.Fprintf(w, "source:\t%s, port %d", r.Source, r.Port)
	if r.Path != "" {
		fmt.Fprintf(w, ", path %s", r.Path)
	}
	if r.SecretFile != "" {
		fmt.Fprintf(w, ", secret %s", r.SecretFile)
	}
	fmt.Fprintln(w)
	for _, c := range r.Clusters {
		fmt.Fprintf(w, "cluster %s:\t%s\n", c.Cluster, strings.Join(c.Metrics, " "))
	}
	if len(r.Refused) > 0 {
		fmt.Fprintf(w, "refused:\t%s\n", byReason(r.Refused))
	}
	fmt.Fprintln(w, "\nSERVER\tAGE\tSTALE\tVALUES\tLAST_ERROR")
	for _, s := range r.Servers {
		var vals []string
		for k, v := range s.Values {
			vals = append(vals, fmt.Sprintf("%s=%.0f", k, v))
		}
		age := "-"
		if s.AgeSeconds >= 0 {
			age = fmt.Sprintf("%.1fs", s.AgeSeconds)
		}
		fmt.Fprintf(w, "%s\t%s\t%v\t%s\t%s\n", s.Address, age, s.Stale, strings.Join(slices.Sorted(slices.Values(vals)), " "), s.LastError)
	}
}

// foldProportions takes the numbers that follow the target into
// --proportions when the flag was given IBM style as four numbers
// ("--proportions 40 40 20 0": the first one is the flag's value, the other
// three follow the target), and returns the arguments left.
func foldProportions(cmd *cobra.Command, args []string) ([]string, error) {
	p := stringFlag(cmd, "proportions")
	if p == nil || len(args) < 2 {
		return args, nil
	}
	fields := strings.FieldsFunc(*p, func(r rune) bool { return r == ',' || r == ' ' })
	need := 4 - len(fields)
	if need <= 0 {
		return args, nil
	}
	take := 0
	for take < need && 1+take < len(args) {
		if _, err := strconv.ParseInt(args[1+take], 10, 64); err != nil {
			break
		}
		take++
	}
	if take == 0 {
		return args, nil
	}
	if err := cmd.Flags().Set("proportions", strings.Join(append(fields, args[1:1+take]...), " ")); err != nil {
		return nil, usagef("--proportions: %v", err)
	}
	return append([]string{args[0]}, args[1+take:]...), nil
}

// proportionsArgs reads cluster add/set's --proportions: four numbers,
// separated by spaces or commas ("40 40 20 0", "40,40,20,0").
func proportionsArgs(cmd *cobra.Command) ([]int64, error) {
	p := stringFlag(cmd, "proportions")
	if p == nil {
		return nil, nil
	}
	fields := strings.FieldsFunc(*p, func(r rune) bool { return r == ',' || r == ' ' })
	if len(fields) != 4 {
		return nil, usagef("--proportions needs 4 numbers (active new port system), got %d", len(fields))
	}
	out := make([]int64, 4)
	for i, f := range fields {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, usagef("--proportions: %q is not an integer", f)
		}
		out[i] = n
	}
	return out, nil
}
