package main

// Shell completion of targets from what dlbd has: "dlbctl server remove
// 10.0.0.100@80@<TAB>" offers the servers of that port, "dlbctl port set
// 10.0.0.100@80 <TAB>" the command's keywords. The shell scripts cobra
// generates ("dlbctl completion bash") run "dlbctl __complete ...", which
// calls these functions; dlbd is asked with --socket or --host as the
// command line gives them, for no longer than completionTimeout unless
// --timeout says otherwise. When dlbd cannot answer, nothing is offered:
// a completion never prints an error into the operator's command line.

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/lb"
)

// completionTimeout bounds dlbd's answer to a completion: the shell waits
// for it.
const completionTimeout = 2 * time.Second

// targetCompletion returns the completion of a command's target of depth
// components (1 cluster, 2 port, 3 server) and of what follows it:
// IBM-style keywords when the command takes them (keywords), nothing
// otherwise. With last false (the "add" commands) the target's last
// component is a new one: only the components before it are offered.
func (a *app) targetCompletion(depth int, last, keywords bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			if !keywords {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return keywordCompletion(cmd, args[1:], toComplete)
		}
		return a.completeTarget(cmd, toComplete, depth, last)
	}
}

// completeTarget completes toComplete, a target of up to depth components
// being typed, from dlbd's clusters, ports and servers.
func (a *app) completeTarget(cmd *cobra.Command, toComplete string, depth int, last bool) ([]cobra.Completion, cobra.ShellCompDirective) {
	none := cobra.ShellCompDirectiveNoFileComp
	sep, comps := completionComponents(toComplete)
	i := len(comps) - 1
	if i >= depth || i == depth-1 && !last {
		return nil, none
	}
	// The item being typed is the one after the component's last '+'.
	cur := comps[i]
	listHead := ""
	if j := strings.LastIndexByte(cur, '+'); j >= 0 {
		listHead, cur = cur[:j+1], cur[j+1:]
	}
	given := strings.Split(comps[i], "+")
	prefix := strings.Join(comps[:i], sep)
	if i > 0 {
		prefix += sep
	}
	prefix += listHead

	// The components before i select what dlbd lists; i is the wildcard.
	wire := make([]string, 0, i+1)
	for _, c := range comps[:i] {
		wire = append(wire, unbracket(c))
	}
	sel := strings.Join(append(wire, ""), "@")
	var items []item
	if !a.askDlbd(cmd, func(ctx context.Context, cl dlbClient) (err error) {
		items, err = targetItems(ctx, cl, i, sel)
		return err
	}) {
		return nil, none
	}
	more := i < depth-1 && listHead == ""
	directive := none
	if more {
		// The target goes on: no space after the separator.
		directive |= cobra.ShellCompDirectiveNoSpace
	}
	var out []cobra.Completion
	seen := map[string]bool{}
	for _, it := range items {
		text := it.text
		if (sep == ":" || strings.HasPrefix(cur, "[")) && i != 1 {
			text = bracket(text)
		}
		if seen[text] || !strings.HasPrefix(text, cur) || slices.Contains(given[:len(given)-1], text) {
			continue
		}
		seen[text] = true
		if more {
			text += sep
		}
		out = append(out, cobra.CompletionWithDesc(prefix+text, it.desc))
	}
	return out, directive
}

// item is one object offered, with what the shell may show beside it.
type item struct{ text, desc string }

// targetItems lists the objects of component i (0 clusters, 1 ports, 2
// servers) that sel selects.
func targetItems(ctx context.Context, cl dlbClient, i int, sel string) ([]item, error) {
	var items []item
	switch i {
	case 0:
		cs, err := cl.Clusters(ctx, "")
		for _, c := range cs {
			items = append(items, item{c.Address, counted(c.Ports, "port", "ports")})
		}
		return items, err
	case 1:
		ps, err := cl.Ports(ctx, sel)
		for _, p := range ps {
			items = append(items, item{fmt.Sprint(p.Port), fmt.Sprintf("%s, %s, %s", p.Protocol, p.Method, counted(p.Servers, "server", "servers"))})
		}
		return items, err
	}
	ss, err := cl.Servers(ctx, sel)
	for _, s := range ss {
		items = append(items, item{s.Address, fmt.Sprintf("%s, weight %d", s.State, s.CurrentWeight)})
	}
	return items, err
}

// completionComponents splits a target being typed into its components
// and says which separator it uses: '@', or ':' when the first component
// is bracketed or holds a '.' (dscontrol's "10.0.0.100:80", where a
// colon after hex digits could be an IPv6 address being typed).
func completionComponents(s string) (string, []string) {
	if strings.Contains(s, "@") {
		return "@", strings.Split(s, "@")
	}
	if strings.HasPrefix(s, "[") && !strings.Contains(s, "]") {
		return ":", []string{s} // an IPv6 cluster being typed
	}
	comps, err := splitOutsideBrackets(s, ':')
	if err == nil && len(comps) > 1 && (strings.HasPrefix(comps[0], "[") || strings.Contains(comps[0], ".")) {
		return ":", comps
	}
	return "@", []string{s}
}

// bracket puts an IPv6 address in brackets, as ':' targets need.
func bracket(s string) string {
	if a, err := netip.ParseAddr(s); err == nil && a.Is6() {
		return "[" + s + "]"
	}
	return s
}

// unbracket turns a component with bracketed IPv6 addresses into the wire
// grammar's.
func unbracket(s string) string {
	return strings.NewReplacer("[", "", "]", "").Replace(s)
}

// keywordCompletion completes the IBM-style keyword pairs after a target:
// a keyword not given yet, or the values of a yes/no keyword or of a flag
// with fixed values.
func keywordCompletion(cmd *cobra.Command, pairs []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	none := cobra.ShellCompDirectiveNoFileComp
	names := keywordNames(cmd)
	used := map[string]bool{}
	for i := 0; i < len(pairs); {
		name, err := matchKeyword(cmd, pairs[i], names)
		if err != nil {
			return nil, none
		}
		used[name] = true
		n := max(keywordArity[name], 1)
		if i+1+n > len(pairs) {
			// toComplete is a value of name.
			if i+1+n > len(pairs)+1 {
				return nil, none // not its first value
			}
			return keywordValues(cmd, name, pairs, toComplete)
		}
		i += 1 + n
	}
	var out []cobra.Completion
	for _, n := range names {
		if !used[n] && !cmd.Flags().Changed(n) && strings.HasPrefix(n, toComplete) {
			out = append(out, cobra.CompletionWithDesc(n, cmd.Flags().Lookup(n).Usage))
		}
	}
	return out, none
}

// keywordValues completes the value of keyword name.
func keywordValues(cmd *cobra.Command, name string, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if cmd.Flags().Lookup(name).Value.Type() == "bool" {
		return filterPrefix([]string{"yes", "no"}, toComplete), cobra.ShellCompDirectiveNoFileComp
	}
	if f, ok := cmd.GetFlagCompletionFunc(name); ok {
		vs, d := f(cmd, args, toComplete)
		return filterPrefix(vs, toComplete), d
	}
	return nil, cobra.ShellCompDirectiveNoFileComp
}

// filterPrefix keeps the completions that start with prefix.
func filterPrefix(cs []cobra.Completion, prefix string) []cobra.Completion {
	var out []cobra.Completion
	for _, c := range cs {
		if strings.HasPrefix(c, prefix) {
			out = append(out, c)
		}
	}
	return out
}

// askDlbd runs ask with the client of the command line's --socket or
// --host, bounded by --timeout when given (and not 0, no limit) and
// completionTimeout otherwise, and reports whether it succeeded; an error goes only to
// cobra's debug file (BASH_COMP_DEBUG_FILE). A completion does not run
// the checks that run before a command (PersistentPreRunE): it makes
// them here.
func (a *app) askDlbd(cmd *cobra.Command, ask func(context.Context, dlbClient) error) bool {
	if !cmd.Flags().Changed("timeout") || a.timeout <= 0 {
		a.timeout = completionTimeout
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	err := a.useRemote(cmd)
	if err == nil {
		err = ask(ctx, a.client())
	}
	if err != nil {
		cobra.CompDebugln(err.Error(), false)
		return false
	}
	return true
}

// advisorCompletion completes "advisor start|set|stop NAME VIP@PORT":
// start offers every advisor and every port; set and stop (started) the
// advisors dlbd runs and their ports.
func (a *app) advisorCompletion(started bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		none := cobra.ShellCompDirectiveNoFileComp
		if len(args) > 1 {
			return nil, none
		}
		if !started {
			if len(args) == 0 {
				return filterPrefix(advisorNames, toComplete), none
			}
			return a.completeTarget(cmd, toComplete, 2, true)
		}
		var rs []api.AdvisorReport
		if !a.askDlbd(cmd, func(ctx context.Context, cl dlbClient) (err error) {
			rs, err = cl.Advisors(ctx)
			return err
		}) {
			return nil, none
		}
		var out []cobra.Completion
		for _, r := range rs {
			v := r.Name
			if len(args) == 1 {
				if r.Name != args[0] {
					continue
				}
				// The port of every cluster as the PORT it was started with.
				v = strings.TrimPrefix(advisorOn(r), "@")
			}
			if strings.HasPrefix(v, toComplete) && !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
		return out, none
	}
}

// interfaceCompletion completes an interface name with this host's
// Ethernet interfaces (lb.Link.Ethernet: what the executor and a
// backend's ARP settings need). With --host, dlbd runs on another
// host: nothing is offered.
func (a *app) interfaceCompletion(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	none := cobra.ShellCompDirectiveNoFileComp
	if a.remote.Address != "" {
		return nil, none
	}
	ifs, err := net.Interfaces()
	if err != nil {
		cobra.CompDebugln(err.Error(), false)
		return nil, none
	}
	var out []cobra.Completion
	for _, ifc := range ifs {
		if !(lb.Link{MAC: ifc.HardwareAddr}).Ethernet() {
			continue
		}
		state := "down"
		if ifc.Flags&net.FlagUp != 0 {
			state = "up"
		}
		out = append(out, cobra.CompletionWithDesc(ifc.Name, fmt.Sprintf("%s, %s", ifc.HardwareAddr, state)))
	}
	return out, none
}
