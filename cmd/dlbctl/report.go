package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/lb"
)

func (a *app) executorReportCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "report",
		Short: "Report the executor: attachment, parameters and packet counters",
		Example: `  dlbctl executor report
  dlbctl executor report -o json`,
		Args: noArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			r, err := a.client().Executor(cmd.Context())
			if err != nil {
				return err
			}
			if r.Reasons == nil {
				r.Reasons = []api.ReasonCount{}
			}
			return a.print(r, func(w io.Writer) { executorTable(w, r) })
		}),
	}
}

func (a *app) clusterReportCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "report [VIP]",
		Short: "Report clusters and their counters",
		Example: `  dlbctl cluster report
  dlbctl cluster report 10.0.0.100 -o yaml`,
		Args:              a.targetArgs(1, targetOpts{optional: true, partial: true}),
		ValidArgsFunction: a.targetCompletion(1, true, false),
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			r, err := a.client().Clusters(cmd.Context(), a.target)
			if err != nil {
				return err
			}
			return a.print(nonNil(r), func(w io.Writer) { clusterTable(w, r) })
		}),
	}
}

func (a *app) portReportCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "report [VIP@PORT]",
		Short: "Report ports, their parameters and counters",
		Long: `Report ports, their parameters and counters.

` + countersHelp + `
HALFOPEN counts the port's connections whose SYN was forwarded and whose
handshake has not completed (ALERT: above --maxhalfopen); AFFINITY the live
affinity records of its servers.`,
		Example: `  dlbctl port report
  dlbctl port report @80            # port 80 of every cluster`,
		Args:              a.targetArgs(2, targetOpts{optional: true, partial: true}),
		ValidArgsFunction: a.targetCompletion(2, true, false),
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			r, err := a.client().Ports(cmd.Context(), a.target)
			if err != nil {
				return err
			}
			return a.print(nonNil(r), func(w io.Writer) { portTable(w, r) })
		}),
	}
}

func (a *app) serverReportCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "report [VIP@PORT@ADDR]",
		Short: "Report servers: configured and current weight, state, counters and MAC address",
		Long: `Report servers: configured and current weight, state, counters and MAC address.

WEIGHT is the configured weight, CURRENT the one the executor uses now (the
manager's, while it runs). ` + countersHelp + `
AFFINITY counts the live affinity records naming the server; MAC is its next
hop's (the router's, for NAT servers behind one).`,
		Example: `  dlbctl server report
  dlbctl server report 10.0.0.100@80        # every server of the port
  dlbctl server report 10.0.0.100:80:10.1.1.5
  dlbctl server report ::                   # everything, as dscontrol
  dlbctl server report @@10.1.1.5 -o json`,
		Args:              a.targetArgs(3, targetOpts{optional: true, partial: true}),
		ValidArgsFunction: a.targetCompletion(3, true, false),
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			r, err := a.client().Servers(cmd.Context(), a.target)
			if err != nil {
				return err
			}
			return a.print(nonNil(r), func(w io.Writer) { serverTable(w, r) })
		}),
	}
}

// countersHelp says what the counter columns of the port and server
// reports count.
const countersHelp = `PACKETS and BYTES count what the executor forwarded (NAT:
both ways), NEWC the connections it scheduled, FIN those that saw a FIN or
an RST, gave way to a new connection from the same client port or expired
while established, all since the executor's tables were created (a dlbd
restart keeps them). ACTV counts the established connections dlbd found at
its latest sweep of the connection table, every 2 s: just after a burst of
short connections, ACTV still shows some that FIN already counts.`

// byReason formats counts by reason, in the reasons' order: "bad
// secret 2, unconfirmed boot 1".
func byReason[N int64 | uint64](counts map[string]N) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	return strings.Join(parts, ", ")
}

// nonNil makes an empty report print as [] rather than null, as dlbd
// sends it.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// print writes a report in the format -o asked for. JSON is the API's
// response body; YAML is the same document, so scripts see the same field
// names whichever they choose.
func (a *app) print(v any, table func(io.Writer)) error {
	w := a.env.stdout
	switch a.output {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("encoding JSON: %w", err)
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		b, err := toYAML(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// toYAML renders v's JSON encoding as YAML. Going through JSON keeps the
// json field names, the field order and the embedded Counters flattened,
// which yaml's own struct encoding would each get differently.
func toYAML(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding JSON: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // counters are uint64: keep every digit
	n, err := yamlNode(dec)
	if err != nil {
		return nil, fmt.Errorf("converting JSON to YAML: %w", err)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return nil, fmt.Errorf("encoding YAML: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encoding YAML: %w", err)
	}
	return buf.Bytes(), nil
}

// yamlNode reads one JSON value from dec as a YAML node.
func yamlNode(dec *json.Decoder) (*yaml.Node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	scalar := func(tag, value string) *yaml.Node {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
	}
	switch t := tok.(type) {
	case json.Delim:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		if t == '{' {
			n = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		}
		for dec.More() {
			if n.Kind == yaml.MappingNode {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, scalar("!!str", k.(string)))
			}
			v, err := yamlNode(dec)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, v)
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		return n, nil
	case string:
		n := scalar("!!str", t)
		if yaml11Ambiguous(t) {
			n.Style = yaml.DoubleQuotedStyle
		}
		return n, nil
	case json.Number:
		if _, err := strconv.ParseInt(t.String(), 10, 64); err == nil {
			return scalar("!!int", t.String()), nil
		}
		if _, err := strconv.ParseUint(t.String(), 10, 64); err == nil {
			return scalar("!!int", t.String()), nil
		}
		return scalar("!!float", t.String()), nil
	case bool:
		return scalar("!!bool", strconv.FormatBool(t)), nil
	case nil:
		return scalar("!!null", "null"), nil
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}

// yaml11Ambiguous reports whether a YAML 1.1 reader (PyYAML, older yq)
// would take the plain string s for something else: a MAC address reads
// as a base 60 number there, "on" or "no" as a boolean. yaml.v3 quotes
// only what YAML 1.2 would misread.
func yaml11Ambiguous(s string) bool {
	switch strings.ToLower(s) {
	case "y", "yes", "n", "no", "on", "off":
		return true
	}
	return strings.Contains(s, ":")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func executorTable(w io.Writer, r api.ExecutorReport) {
	fmt.Fprintf(w, "started:\t%s\n", yesNo(r.Started))
	if r.State != "" {
		state := r.State
		if r.Detached != "" {
			state += " (" + r.Detached
			if r.DetachedSince != "" {
				state += " at " + r.DetachedSince
			}
			state += "; it attaches again when an interface of that name appears, or, its tables kept, to another: dlbctl executor start --interface NAME)"
		}
		fmt.Fprintf(w, "state:\t%s\n", state)
	}
	fmt.Fprintf(w, "interface:\t%s\n", orDash(r.Interface))
	mode := orDash(r.XDPMode)
	if r.AttachedMode != "" && r.AttachedMode != r.XDPMode {
		mode += ", attached as " + r.AttachedMode
	}
	fmt.Fprintf(w, "xdp mode:\t%s\n", mode)
	if r.Attached {
		fmt.Fprintf(w, "attached:\tyes (ifindex %d, link id %d, program id %d)\n", r.Ifindex, r.LinkID, r.ProgramID)
	} else {
		fmt.Fprintf(w, "attached:\tno\n")
	}
	if r.PinDir != "" {
		fmt.Fprintf(w, "pin dir:\t%s\n", r.PinDir)
	}
	if r.Error != "" {
		fmt.Fprintf(w, "error:\t%s\n", r.Error)
	}
	for _, warning := range r.Warnings {
		fmt.Fprintf(w, "warning:\t%s\n", warning)
	}
	if len(r.Dropping) > 0 {
		fmt.Fprintf(w, "dropping:\t%s\n", lb.DroppingText(r.Dropping, seconds(r.DroppingSeconds)))
	}
	if t := r.Trace; t != nil {
		fmt.Fprintf(w, "packet trace:\trunning since %s (%s), %d packets so far\n", t.Since, t.Filter, t.Packets)
	}
	fmt.Fprintf(w, "nfa:\t%s\n", orNone(r.NFA))
	fmt.Fprintf(w, "nfa6:\t%s\n", orNone(r.NFA6))
	fmt.Fprintf(w, "client gateway:\t%s\n", orNone(r.ClientGateway))
	fmt.Fprintf(w, "client gateway6:\t%s\n", orNone(r.ClientGateway6))
	fmt.Fprintf(w, "fintimeout:\t%d s\n", r.FinTimeout)
	// Sizes are zero while the executor is not loaded: say so rather
	// than show a table of capacity 0.
	if r.ConnectionCapacity > 0 {
		fmt.Fprintf(w, "connections:\t%d/%d\n", r.Connections, r.ConnectionCapacity)
	} else {
		fmt.Fprintf(w, "connections:\t-\n")
	}
	fmt.Fprintf(w, "nat capacity:\t%s\n", sizeOrDash(r.NATCapacity))
	fmt.Fprintf(w, "half-open capacity:\t%s\n", sizeOrDash(r.HalfOpenCapacity))
	switch {
	case r.AffinityCapacity > 0:
		fmt.Fprintf(w, "affinity records:\t%d/%d\n", r.AffinityRecords, r.AffinityCapacity)
	case r.AffinityRecords > 0:
		fmt.Fprintf(w, "affinity records:\t%d\n", r.AffinityRecords)
	default:
		fmt.Fprintf(w, "affinity records:\t-\n")
	}
	fmt.Fprintf(w, "maglev size:\t%s\n", sizeOrDash(r.MaglevSize))
	// A line without a tab ends tabwriter's column block, so each table
	// below is aligned on its own.
	if len(r.ReturnAddresses) > 0 {
		fmt.Fprintf(w, "\n")
		fmt.Fprintf(w, "RETURN ADDRESS\tPORTS\tESTABLISHED\tHALF-OPEN\n")
		for _, ra := range r.ReturnAddresses {
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\n", ra.Address, ra.Ports, ra.Established, ra.HalfOpen)
		}
	}
	fmt.Fprintf(w, "\n")
	fmt.Fprintf(w, "REASON\tPACKETS\tBYTES\n")
	var nbytes uint64
	for _, rc := range r.Reasons {
		fmt.Fprintf(w, "%s\t%d\t%d\n", rc.Reason, rc.Packets, rc.Bytes)
		nbytes += rc.Bytes
	}
	fmt.Fprintf(w, "total\t%d\t%d\n", r.Packets, nbytes)
	if len(r.Events) > 0 {
		fmt.Fprintf(w, "\n")
		fmt.Fprintf(w, "EVENT\tCOUNT\n")
		for _, name := range slices.Sorted(maps.Keys(r.Events)) {
			fmt.Fprintf(w, "%s\t%d\n", name, r.Events[name])
		}
	}
}

// orNone shows an unset address as "none", the word that clears it.
func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// sizeOrDash formats a table size, which is 0 while the executor is not
// loaded (or dlbd does not have the table).
func sizeOrDash(n uint32) string {
	if n == 0 {
		return "-"
	}
	return strconv.FormatUint(uint64(n), 10)
}

// numOrDash formats a parameter whose 0 means "not set".
func numOrDash[T uint8 | uint16 | uint32](n T) string {
	if n == 0 {
		return "-"
	}
	return strconv.FormatUint(uint64(n), 10)
}

func clusterTable(w io.Writer, rs []api.ClusterReport) {
	fmt.Fprintf(w, "CLUSTER\tCONFIGURE\tPORTS\tPACKETS\tBYTES\tNEWC\tACTV\tFIN\n")
	for _, r := range rs {
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\n", r.Address, yesNo(r.Configure), r.Ports, counters(r.Counters))
	}
}

// portTable shows a port's parameters, then its counters: the
// connection counters, the half-open connections (ALERT above
// maxhalfopen) and the affinity records. Parameters whose 0 means unset
// show as '-'.
func portTable(w io.Writer, rs []api.PortReport) {
	fmt.Fprintf(w, "CLUSTER\tPORT\tPROTOCOL\tMETHOD\tSELECTION\tSTICKYTIME\tSTICKYMASK\tCROSSPORT\tSTALETIMEOUT\tWEIGHTBOUND\tMAXHALFOPEN\tSERVERS\t"+
		"PACKETS\tBYTES\tNEWC\tACTV\tFIN\tHALFOPEN\tAFFINITY\n")
	for _, r := range rs {
		halfOpen := strconv.FormatUint(r.HalfOpen, 10)
		if r.HalfOpenAlert {
			halfOpen += " ALERT"
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s\t%d\t%d\t%s\t%d\t%s\t%s\t%d\n", r.Cluster, r.Port, r.Protocol, r.Method,
			orDash(r.SelectionAlgorithm), r.StickyTime, numOrDash(r.StickyMask), numOrDash(r.CrossPort), r.StaleTimeout,
			r.WeightBound, numOrDash(r.MaxHalfOpen), r.Servers, counters(r.Counters), halfOpen, r.AffinityRecords)
	}
}

// serverTable shows a server's weights (the configured one, and the one
// the executor uses now, which the manager sets while it runs), state,
// counters and affinity records, then where it is: its MAC address and its
// NAT settings.
func serverTable(w io.Writer, rs []api.ServerReport) {
	fmt.Fprintf(w, "CLUSTER\tPORT\tSERVER\tWEIGHT\tCURRENT\tSTATE\tPACKETS\tBYTES\tNEWC\tACTV\tFIN\tAFFINITY\tMAC\tMAPPORT\tRETURNADDRESS\tROUTER\n")
	for _, r := range rs {
		fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.Cluster, r.Port, r.Address, r.Weight, r.CurrentWeight, r.State,
			counters(r.Counters), r.AffinityRecords, orDash(r.MAC), numOrDash(r.MapPort), orDash(r.ReturnAddress), orDash(r.Router))
	}
}

// counters formats the PACKETS BYTES NEWC ACTV FIN columns.
func counters(c api.Counters) string {
	return fmt.Sprintf("%d\t%d\t%d\t%d\t%d", c.Packets, c.Bytes, c.NewConnections, c.ActiveConnections, c.FinishedConnections)
}

// seconds turns a report's seconds into a duration.
func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second))
}
