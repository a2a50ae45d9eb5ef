package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/client"
)

const applyLong = `Make dlbd's configuration equal to a configuration file, as one change:
dlbd applies all of it or, if it refuses anything, none of it. Objects the
file does not change are not touched: their established connections keep
flowing. FILE "-" reads standard input.

--diff (or --dry-run) prints what it would change and changes nothing.
Each change is the dlbctl command that makes it, after + (added), -
(removed) or ~ (changed), with the old values of a set after "# was".

The file is YAML (or JSON) with the model of "dlbctl file save"; its keys
are dlbctl's keywords, and a key left out takes the default dlbctl would
give it. "dlbctl get -o yaml" prints the running configuration in this
format, so "dlbctl get -o yaml | dlbctl apply -f -" changes nothing:

  executor:
    started: true
    interface: eth0
    xdp-mode: auto              # auto, native or generic
    nfa: 198.18.0.2             # nfa6, clientgateway, clientgateway6, fintimeout
  manager:
    started: true               # interval, refresh, smoothing, sensitivity
  metricserver:                 # source, port, secret-file, path
    secret-file: /etc/dlb/metric.secret
  clusters:
    - address: 198.18.0.100
      configure: true
      announce: true            # over BGP; communities: [65000:100], med
      proportions: {active: 49, new: 50, port: 1, system: 0}
      metrics: [cpuload]
      ports:
        - port: 80              # protocol, method, stickytime, stickymask,
          method: mac           # crossport, selectionalgorithm, maxhalfopen,
          servers:              # staletimeout, weightbound, alldown, tablesize
            - address: 198.18.0.21
              weight: 10        # default: the port's weightbound
            - address: 198.18.0.22
              down: true        # fixedweight, quiesced (true or now),
                                # advisorrequest, advisorresponse,
                                # mapport, returnaddress, router
  advisors:
    - name: http                # cluster: one cluster (default: every
      port: 80                  # cluster balancing the port); interval,
                                # connecttimeout, receivetimeout, retries,
                                # rise, fall, program, args, mode
  ha:                           # reserved for high availability (empty)
  bgp:                          # the BGP speaker ("bgp set"), if any
    asn: 65001
    routerid: 198.18.0.2        # listen-port (default 0: outgoing only)
    neighbors:                  # "bgp neighbor add"
      - address: 198.18.0.1
        remote-as: 65000        # holdtime (9), multihop, port (179),
                                # password-file, bfd

A cluster's proportions default to 50 50 0 0, raised as "advisor start"
and "metric add" raise them. An error names the line and the field's path:
"dlb.yaml: line 14: clusters[0].ports[0].servers[1].weight: 30 is outside
0..20 (the port's weightbound)". dlbd checks the file against the running
configuration and the host: nothing is changed unless all of it is right.`

func (a *app) applyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "apply -f FILE [--diff]",
		Short: "Make the configuration equal to a configuration file (YAML), all or nothing",
		Long:  applyLong,
		Example: `  dlbctl apply -f /etc/dlb/dlb.yaml --diff
  dlbctl apply -f /etc/dlb/dlb.yaml
  dlbctl get -o yaml > dlb.yaml; vi dlb.yaml; dlbctl apply -f dlb.yaml`,
		Args: noArgs,
		RunE: a.runE(a.apply),
	}
	f := cmd.Flags()
	f.StringP("filename", "f", "", `the configuration file ("-": standard input)`)
	f.Bool("diff", false, "print what would change, and change nothing")
	f.Bool("dry-run", false, "the same as --diff")
	_ = cmd.MarkFlagRequired("filename")
	_ = cmd.MarkFlagFilename("filename", "yaml", "yml", "json")
	return cmd
}

// maxConfigFile bounds the file dlbctl reads (dlbd has its own limit).
const maxConfigFile = 256 << 20

func (a *app) apply(cmd *cobra.Command, _ []string) error {
	name, _ := cmd.Flags().GetString("filename")
	diff, _ := cmd.Flags().GetBool("diff")
	dry, _ := cmd.Flags().GetBool("dry-run")
	dryRun := diff || dry
	var r io.Reader
	label := name
	if name == "-" {
		r, label = a.env.stdin, "standard input"
	} else {
		f, err := os.Open(name)
		if err != nil {
			return fmt.Errorf("reading the configuration file: %w", err)
		}
		defer f.Close()
		r = f
	}
	data, err := readAllBounded(r, label)
	if err != nil {
		return err
	}
	res, err := a.client().ApplyConfig(cmd.Context(), data, dryRun)
	if err != nil {
		var re *client.RefusedError
		if errors.As(err, &re) {
			return fmt.Errorf("%s: %w (nothing was changed)", label, err)
		}
		return err
	}
	if res.Changes == nil {
		res.Changes = []api.ConfigChange{}
	}
	a.warnings(res.Warnings)
	return a.print(res, func(w io.Writer) { writeChanges(w, res, dryRun) })
}

// changeMarks mark each kind of change, as a diff does.
var changeMarks = map[string]string{api.ChangeAdded: "+", api.ChangeRemoved: "-", api.ChangeChanged: "~"}

// writeChanges prints the changes one a line, then a summary.
func writeChanges(w io.Writer, res api.ConfigResult, dryRun bool) {
	if len(res.Changes) == 0 {
		fmt.Fprintln(w, "no changes")
		return
	}
	count := map[string]int{}
	for _, c := range res.Changes {
		line := changeMarks[c.Kind] + " " + c.Command
		if c.Was != "" {
			line += "  # was " + c.Was
		}
		fmt.Fprintln(w, line)
		count[c.Kind]++
	}
	var parts []string
	for _, k := range []string{api.ChangeAdded, api.ChangeRemoved, api.ChangeChanged} {
		if count[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", count[k], k))
		}
	}
	what, tail := "applied", ""
	if dryRun {
		what, tail = "would apply", " (nothing was changed)"
	}
	fmt.Fprintf(w, "%s %d %s: %s%s\n", what, len(res.Changes), plural(len(res.Changes), "change", "changes"), strings.Join(parts, ", "), tail)
	for _, n := range res.Notes {
		fmt.Fprintln(w, n)
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// counted is n and the noun that goes with it: "1 port", "2 ports".
func counted(n int, one, many string) string {
	return fmt.Sprintf("%d %s", n, plural(n, one, many))
}

func (a *app) getCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "get [-o yaml|json]",
		Short: "Print the configuration as a configuration file (for dlbctl apply)",
		Long: `Print dlbd's configuration as a configuration file: YAML (the default, and
for -o table) or JSON (-o json). "dlbctl apply -f FILE" makes a
configuration equal to such a file; see "dlbctl apply --help" for its
format.`,
		Example: `  dlbctl get > /etc/dlb/dlb.yaml
  dlbctl get -o json
  dlbctl get -o yaml | dlbctl apply -f - --diff`,
		Args: noArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			format := api.FormatYAML
			if a.output == "json" {
				format = api.FormatJSON
			}
			data, err := a.client().ConfigFile(cmd.Context(), format)
			if err != nil {
				return err
			}
			_, err = a.env.stdout.Write(data)
			return err
		}),
	}
}
