package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dlbproject/dlb/pkg/api"
)

// annotOp marks commands that change the configuration: only those may
// appear in a script that "file load" runs.
const annotOp = "dlbctl/op"

// noun returns a command that groups verbs. Unlike cobra's default for a
// command without Run, an unknown verb is a usage error, not help.
func (a *app) noun(use, short, example string, verbs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{
		Use:     use,
		Short:   short,
		Example: example,
		Args:    cobra.ArbitraryArgs,
		RunE: a.runE(func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			return usagef("unknown command %q for %q%s", args[0], cmd.CommandPath(), suggestions(cmd, args[0]))
		}),
	}
	c.AddCommand(verbs...)
	return c
}

func suggestions(cmd *cobra.Command, arg string) string {
	s := cmd.SuggestionsFor(arg)
	if len(s) == 0 {
		return ""
	}
	return "; did you mean " + strings.Join(s, " or ") + "?"
}

// opCmd turns c into a command that changes the configuration: build
// makes its operation from the arguments and the flags, and the operation
// is sent to dlbd, or collected when a script is being loaded. Both paths
// share build, so a script line means exactly what the command means.
func (a *app) opCmd(c *cobra.Command, build func(cmd *cobra.Command, args []string) api.Op) *cobra.Command {
	c.Annotations = map[string]string{annotOp: "true"}
	c.RunE = a.runE(func(cmd *cobra.Command, args []string) error {
		op := build(cmd, args)
		if a.collect != nil {
			*a.collect = append(*a.collect, op)
			return nil
		}
		res, err := a.client().Apply(cmd.Context(), op)
		if err != nil {
			return err
		}
		return a.printResult(res)
	})
	return c
}

// warnings prints the warnings of an accepted change on stderr, whatever
// the output format, so that they are not missed.
func (a *app) warnings(ws []string) {
	for _, w := range ws {
		fmt.Fprintf(a.env.stderr, "dlbctl: warning: %s\n", w)
	}
}

// printResult prints what dlbd said about an accepted change, if it said
// anything: in a table, its notes on stdout and its warnings (the change
// was applied, but something keeps it from working) on stderr; with -o
// json or yaml, the result on stdout (and the warnings on stderr too, so
// that they are not missed).
func (a *app) printResult(res api.Result) error {
	a.warnings(res.Warnings)
	if len(res.Notes)+len(res.Warnings) == 0 {
		return nil
	}
	return a.print(res, func(w io.Writer) {
		for _, n := range res.Notes {
			fmt.Fprintln(w, n)
		}
	})
}

// target returns an argument validator for commands that take one target
// of the given form, or at most one if optional, as it is (see targetArgs
// for addresses).
func target(form string, optional bool) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) == 0 && !optional:
			return usagef("%s needs a target (%s)", cmdName(cmd), form)
		case len(args) > 1:
			return usagef("%s takes one target (%s), got %d arguments", cmdName(cmd), form, len(args))
		}
		return nil
	}
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments (got %q)", cmdName(cmd), args[0])
	}
	return nil
}

// cmdName is the command's path without "dlbctl", for messages that
// "dlbctl: " already starts.
func cmdName(cmd *cobra.Command) string {
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}

// The *Flag helpers return the value of a flag the user set, or nil: an
// operation carries only the parameters given, and dlbd leaves the others
// as they are.

func stringFlag(cmd *cobra.Command, name string) *string {
	if !cmd.Flags().Changed(name) {
		return nil
	}
	v, _ := cmd.Flags().GetString(name)
	return &v
}

func intFlag(cmd *cobra.Command, name string) *int64 {
	if !cmd.Flags().Changed(name) {
		return nil
	}
	v, _ := cmd.Flags().GetInt64(name)
	return &v
}

func boolFlag(cmd *cobra.Command, name string) *bool {
	if !cmd.Flags().Changed(name) {
		return nil
	}
	v, _ := cmd.Flags().GetBool(name)
	return &v
}

func (a *app) executorCmd() *cobra.Command {
	start := a.opCmd(&cobra.Command{
		Use:   "start [--interface IF] [--xdp-mode auto|native|generic]",
		Short: "Attach the executor to an interface and start forwarding",
		Long: `Attach the executor (dlbd's XDP program) to an interface and start
forwarding. Without --interface, dlbd uses the interface it was last
started on.

On a running executor, another --interface or --xdp-mode attaches it
there, its connection tables kept: established connections go on (NAT
ones too) wherever the new interface reaches their clients and servers,
and the addresses dlbd put on the old interface move with it. (executor
stop removes the tables.)`,
		Example: `  dlbctl executor start --interface eth0
  dlbctl executor start --interface eth0 --xdp-mode generic
  dlbctl executor start --interface bond0         # moves a running executor`,
		Args: noArgs,
	}, func(cmd *cobra.Command, _ []string) api.Op {
		return api.Op{Object: api.ObjectExecutor, Action: api.ActionStart,
			Interface: stringFlag(cmd, "interface"), XDPMode: stringFlag(cmd, "xdp-mode")}
	})
	start.Flags().String("interface", "", "network interface to attach to")
	_ = start.RegisterFlagCompletionFunc("interface", a.interfaceCompletion)
	start.Flags().String("xdp-mode", "", "XDP attach mode: auto, native or generic (dlbd's default: auto)")
	_ = start.RegisterFlagCompletionFunc("xdp-mode", fixedCompletion("auto", "native", "generic"))

	stop := a.opCmd(&cobra.Command{
		Use:     "stop",
		Short:   "Detach the executor and stop forwarding",
		Example: `  dlbctl executor stop`,
		Args:    noArgs,
	}, func(*cobra.Command, []string) api.Op {
		return api.Op{Object: api.ObjectExecutor, Action: api.ActionStop}
	})

	set := a.opCmd(&cobra.Command{
		Use:   "set KEYWORD VALUE [KEYWORD VALUE...]",
		Short: "Set executor parameters (nfa, clientgateway, fintimeout)",
		Long: `Set executor parameters, IBM style as keyword-value pairs (or as flags,
--nfa ADDR, before the first keyword):

  nfa ADDR|none         the non-forwarding address: traffic to it is never
                        balanced
  clientgateway ADDR|none
                        the router through which method nat ports send the
                        servers' replies to clients
  fintimeout SECONDS    how long a connection that saw a FIN or RST keeps its
                        entry in the connection table (default 60)

The executor has an IPv4 and an IPv6 value of nfa and of clientgateway: an
address sets the value of its family and leaves the other as it is, and
"none" clears both. Setting both takes two commands.

Unique prefixes of keywords are accepted. Flags (--socket) go before the
first keyword.`,
		Example: `  dlbctl executor set nfa 192.0.2.10
  dlbctl executor set nfa 2001:db8::10
  dlbctl executor set clientgateway 192.0.2.1
  dlbctl executor set fintimeout 30
  dlbctl executor set nfa 192.0.2.10 fintimeout 30`,
		Args:      a.executorSetArgs,
		ValidArgs: executorKeywords,
	}, func(cmd *cobra.Command, args []string) api.Op {
		op := api.Op{Object: api.ObjectExecutor, Action: api.ActionSet}
		// executorSetArgs checked the keywords and values already, and
		// resolved the host names (resolveParam remembers them).
		args = executorPairs(cmd, args)
		for i := 0; i+1 < len(args); i += 2 {
			switch kw, _ := executorKeyword(args[i]); kw {
			case "nfa":
				v, _ := a.resolveParam(cmd.Context(), "nfa", args[i+1], 0)
				op.NFA = &v
			case "clientgateway":
				v, _ := a.resolveParam(cmd.Context(), "clientgateway", args[i+1], 0)
				op.ClientGateway = &v
			case "fintimeout":
				v, _ := strconv.ParseInt(args[i+1], 10, 64)
				op.FinTimeout = &v
			}
		}
		return op
	})
	// Keyword values are values even when they look like flags
	// ("fintimeout -5" must reach dlbd and be refused there, naming the
	// field): flags end at the first keyword.
	set.Flags().SetInterspersed(false)
	set.Flags().String("nfa", "", "the non-forwarding address, or none (as keyword nfa ADDR)")
	set.Flags().String("clientgateway", "", "the router NAT replies go to clients through, or none (as keyword clientgateway ADDR)")
	set.Flags().String("fintimeout", "", "seconds a finished connection keeps its entry (as keyword fintimeout SECONDS)")

	return a.noun("executor", "Start, stop, set and report the executor (the XDP forwarder)",
		`  dlbctl executor start --interface eth0
  dlbctl executor report`,
		start, stop, set, a.executorReportCmd(), a.executorTraceCmd())
}

var executorKeywords = []string{"nfa", "clientgateway", "fintimeout"}

// executorKeyword resolves a keyword of "executor set" or its unique
// prefix.
func executorKeyword(s string) (string, bool) {
	var found []string
	for _, kw := range executorKeywords {
		if kw == s {
			return kw, true
		}
		if strings.HasPrefix(kw, s) && s != "" {
			found = append(found, kw)
		}
	}
	if len(found) == 1 {
		return found[0], true
	}
	return "", false
}

// executorPairs returns the keyword-value pairs of "executor set": those
// given as flags (--nfa ADDR), then those given as keywords.
func executorPairs(cmd *cobra.Command, args []string) []string {
	var out []string
	for _, kw := range executorKeywords {
		if f := cmd.Flags().Lookup(kw); f != nil && f.Changed {
			out = append(out, kw, f.Value.String())
		}
	}
	return append(out, args...)
}

func (a *app) executorSetArgs(cmd *cobra.Command, args []string) error {
	args = executorPairs(cmd, args)
	if len(args) == 0 {
		return usagef("executor set needs KEYWORD VALUE (keywords: %s)", strings.Join(executorKeywords, ", "))
	}
	seen := map[string]bool{}
	for i := 0; i < len(args); i += 2 {
		kw, ok := executorKeyword(args[i])
		if !ok {
			n := len(executorKeywords)
			return usagef("unknown executor keyword %q (want %s or %s)", args[i],
				strings.Join(executorKeywords[:n-1], ", "), executorKeywords[n-1])
		}
		if seen[kw] {
			// An operation carries one value of each: the IPv4 and the
			// IPv6 address of nfa or clientgateway take two commands.
			return usagef("executor keyword %s given twice (set each value with its own executor set)", kw)
		}
		seen[kw] = true
		if i+1 == len(args) {
			return usagef("executor keyword %s needs a value", kw)
		}
		if kw == "fintimeout" {
			if _, err := strconv.ParseInt(args[i+1], 10, 64); err != nil {
				return usagef("invalid fintimeout %q: want a whole number of seconds", args[i+1])
			}
		}
	}
	// Host names given for addresses, once the syntax is right.
	for i := 0; i+1 < len(args); i += 2 {
		if kw, _ := executorKeyword(args[i]); kw != "fintimeout" {
			if _, err := a.resolveParam(cmd.Context(), kw, args[i+1], 0); err != nil {
				return err
			}
		}
	}
	return nil
}

func (a *app) clusterCmd() *cobra.Command {
	clusterArgs := func(cmd *cobra.Command, args []string) error {
		args, err := foldProportions(cmd, args)
		if err != nil {
			return err
		}
		if err := a.targetArgs(1, targetOpts{keywords: true})(cmd, args); err != nil {
			return err
		}
		if _, err = proportionsArgs(cmd); err != nil {
			return err
		}
		_, err = yesNoFlag(cmd, "announce")
		return err
	}
	clusterOp := func(action string) func(*cobra.Command, []string) api.Op {
		return func(cmd *cobra.Command, _ []string) api.Op {
			p, _ := proportionsArgs(cmd)
			op := api.Op{Object: api.ObjectCluster, Action: action, Target: a.target,
				Configure: boolFlag(cmd, "configure"), Proportions: p, PrimaryHost: stringFlag(cmd, "primaryhost")}
			announceOp(cmd, &op)
			return op
		}
	}
	const propHelp = "the manager's proportions: active new port system, summing to 100 (default 50 50 0 0)"
	const primaryHelp = "mutual high availability: the heartbeat address of the dispatcher that is this cluster's preferred active (none: unset)"
	add := a.opCmd(&cobra.Command{
		Use:   "add VIP[+VIP...] [--configure] [--proportions A N P S] [--primaryhost ADDR] [--announce yes|no] [--community C] [--med N]",
		Short: "Add clusters (virtual addresses)",
		Example: `  dlbctl cluster add 10.0.0.100
  dlbctl cluster add 10.0.0.100+10.0.0.101 --configure`,
		Args:              clusterArgs,
		ValidArgsFunction: a.targetCompletion(1, false, true),
	}, clusterOp(api.ActionAdd))
	add.Flags().Bool("configure", false, "put the cluster address on the executor's interface")
	add.Flags().String("proportions", "", propHelp)
	add.Flags().String("primaryhost", "", primaryHelp)
	announceFlags(add)

	set := a.opCmd(&cobra.Command{
		Use:   "set VIP [--configure=true|false] [--proportions A N P S] [--primaryhost ADDR|none] [--announce yes|no] [--community C] [--med N]",
		Short: "Change a cluster's proportions, whether dlbd puts its address on the interface, its preferred active, or its BGP announcement",
		Example: `  dlbctl cluster set 10.0.0.100 --configure=false
  dlbctl cluster set 10.0.0.100 --announce yes --community 65000:100 --med 10
  dlbctl cluster set 10.0.0.100 --proportions 30 30 40 0
  dlbctl cluster set 10.0.0.100 proportions 49 50 1 0      # IBM style`,
		Args:              clusterArgs,
		ValidArgsFunction: a.targetCompletion(1, true, true),
	}, clusterOp(api.ActionSet))
	set.Flags().Bool("configure", false, "put the cluster address on the executor's interface")
	set.Flags().String("proportions", "", propHelp)
	set.Flags().String("primaryhost", "", primaryHelp)
	announceFlags(set)
	set.MarkFlagsOneRequired("configure", "proportions", "primaryhost", "announce", "community", "med")

	remove := a.opCmd(&cobra.Command{
		Use:   "remove VIP",
		Short: "Remove clusters with their ports and servers",
		Long: `Remove clusters with their ports and servers. The advisors of a removed
cluster stop with it, and so does an advisor of every cluster's port (advisor
start NAME @PORT) when no cluster is left with that port.`,
		Example:           `  dlbctl cluster remove 10.0.0.100`,
		Args:              a.targetArgs(1, targetOpts{}),
		ValidArgsFunction: a.targetCompletion(1, true, false),
	}, func(*cobra.Command, []string) api.Op {
		return api.Op{Object: api.ObjectCluster, Action: api.ActionRemove, Target: a.target}
	})

	return a.noun("cluster", "Add, set, remove and report clusters (virtual addresses)",
		`  dlbctl cluster add 10.0.0.100
  dlbctl cluster report`,
		add, set, remove, a.clusterReportCmd())
}

// portFlags adds the flags of "port add" and "port set".
func portFlags(c *cobra.Command) *cobra.Command {
	f := c.Flags()
	f.String("protocol", "", "protocol to balance: tcp, udp or both (dlbd's default: tcp)")
	f.String("method", "", "forwarding method: mac (dlbd's default) or nat")
	f.Int64("stickytime", 0, "affinity time in seconds (0: none)")
	f.Int64("stickymask", 0, "affinity by client network: prefix length in bits (0: the whole client address)")
	f.Int64("crossport", 0, "another port of the cluster that shares this port's affinity: a client goes to the same server on both (0: none)")
	f.String("selectionalgorithm", "", "how a server is chosen: connection, affinity (dlbd's default) or conn+affin")
	f.Int64("maxhalfopen", 0, "half-open connections above which dlbd raises a halfOpenAlert (0: no alert)")
	f.Int64("staletimeout", 0, "seconds an idle connection keeps its entry (dlbd's default: 300)")
	f.Int64("weightbound", 0, "highest server weight on the port (dlbd's default: 20)")
	f.String("alldown", "", "when no server takes new connections: refuse (default) or spread over all")
	f.Int64("tablesize", 0, "slots of the port's Maglev table, a prime up to dlbd --max-table-size (0: chosen from the number of servers, about 100 a server)")
	_ = c.RegisterFlagCompletionFunc("protocol", fixedCompletion("tcp", "udp", "both"))
	_ = c.RegisterFlagCompletionFunc("method", fixedCompletion("mac", "nat"))
	_ = c.RegisterFlagCompletionFunc("selectionalgorithm", fixedCompletion("connection", "affinity", "conn+affin"))
	return c
}

func (a *app) portOp(action string) func(*cobra.Command, []string) api.Op {
	return func(cmd *cobra.Command, _ []string) api.Op {
		return api.Op{Object: api.ObjectPort, Action: action, Target: a.target,
			Protocol: stringFlag(cmd, "protocol"), Method: stringFlag(cmd, "method"),
			StickyTime: intFlag(cmd, "stickytime"), StickyMask: intFlag(cmd, "stickymask"),
			CrossPort: intFlag(cmd, "crossport"), SelectionAlgorithm: stringFlag(cmd, "selectionalgorithm"),
			MaxHalfOpen: intFlag(cmd, "maxhalfopen"), StaleTimeout: intFlag(cmd, "staletimeout"),
			WeightBound: intFlag(cmd, "weightbound"), AllDown: stringFlag(cmd, "alldown"), TableSize: intFlag(cmd, "tablesize")}
	}
}

func (a *app) portCmd() *cobra.Command {
	add := portFlags(a.opCmd(&cobra.Command{
		Use:   "add VIP@PORT [flags]",
		Short: "Add ports to clusters",
		Example: `  dlbctl port add 10.0.0.100@80
  dlbctl port add 10.0.0.100@53 --protocol both --staletimeout 30
  dlbctl port add @443 --weightbound 50   # port 443 on every cluster
  dlbctl port add 10.0.0.100@8080 --method nat --maxhalfopen 1000
  dlbctl port add 10.0.0.100@443 --stickytime 300 --stickymask 24 --crossport 80`,
		Args:              a.targetArgs(2, targetOpts{keywords: true}),
		ValidArgsFunction: a.targetCompletion(2, false, true),
	}, a.portOp(api.ActionAdd)))

	set := portFlags(a.opCmd(&cobra.Command{
		Use:   "set VIP@PORT [flags]",
		Short: "Change ports' parameters",
		Example: `  dlbctl port set 10.0.0.100@80 --staletimeout 600
  dlbctl port set 10.0.0.100:80 staletimeout 600           # IBM style
  dlbctl port set 10.0.0.100@80 --selectionalgorithm conn+affin
  dlbctl port set 10.0.0.100@443 --crossport 0     # stop sharing affinity
  dlbctl port set 10.0.0.100@80 --tablesize 65537  # fix the Maglev table's size`,
		Args:              a.targetArgs(2, targetOpts{keywords: true}),
		ValidArgsFunction: a.targetCompletion(2, true, true),
	}, a.portOp(api.ActionSet)))
	set.MarkFlagsOneRequired("protocol", "method", "stickytime", "stickymask", "crossport", "selectionalgorithm",
		"maxhalfopen", "staletimeout", "weightbound", "alldown", "tablesize")

	remove := a.opCmd(&cobra.Command{
		Use:   "remove VIP@PORT",
		Short: "Remove ports with their servers",
		Long: `Remove ports with their servers. An advisor left with no port to probe
stops: one of the removed port (advisor start NAME VIP@PORT), or one of every
cluster's port (@PORT) when no cluster is left with that port.`,
		Example:           `  dlbctl port remove 10.0.0.100@80`,
		Args:              a.targetArgs(2, targetOpts{}),
		ValidArgsFunction: a.targetCompletion(2, true, false),
	}, func(*cobra.Command, []string) api.Op {
		return api.Op{Object: api.ObjectPort, Action: api.ActionRemove, Target: a.target}
	})

	return a.noun("port", "Add, set, remove and report ports of clusters",
		`  dlbctl port add 10.0.0.100@80
  dlbctl port report 10.0.0.100@80`,
		add, set, remove, a.portReportCmd())
}

func (a *app) serverCmd() *cobra.Command {
	add := a.opCmd(&cobra.Command{
		Use:   "add VIP@PORT@ADDR [--weight N] [flags]",
		Short: "Add servers to ports",
		Long: `Add servers to ports. A server's weight defaults to the port's
weightbound.

` + serverNATHelp,
		Example: `  dlbctl server add 10.0.0.100@80@10.1.1.5 --weight 5
  dlbctl server add 10.0.0.100:80:server1 weight 5        # host name, resolved once
  dlbctl server add [2001:db8::100]:80:[2001:db8::5]
  dlbctl server add 10.0.0.100@80@10.1.1.5+10.1.1.6
  dlbctl server add @80@10.1.1.7          # to port 80 of every cluster
  dlbctl server add 10.0.0.100@80@198.18.1.11 --mapport 8080 --returnaddress 10.0.0.3 --router 10.0.0.254`,
		Args:              a.serverArgs,
		ValidArgsFunction: a.targetCompletion(3, false, true),
	}, a.serverOp(api.ActionAdd))
	serverFlags(add)
	add.Flags().Int64("weight", 0, "weight, 0..weightbound (dlbd's default: the port's weightbound)")

	set := a.opCmd(&cobra.Command{
		Use:   "set VIP@PORT@ADDR [--weight N] [--fixedweight yes|no] [--advisorrequest R] [--advisorresponse R] [flags]",
		Short: "Change servers' weight, advisor and NAT settings",
		Long: `Change servers' weight, advisor and NAT settings.

` + serverNATHelp,
		Example: `  dlbctl server set 10.0.0.100@80@10.1.1.5 --weight 10
  dlbctl server set 10.0.0.100:80:10.1.1.5 weight 10       # IBM style
  dlbctl server set 10.0.0.100@80@10.1.1.5 --fixedweight yes
  dlbctl server set 10.0.0.100@80@10.1.1.5 --advisorrequest "GET /health HTTP/1.1" --advisorresponse ok
  dlbctl server set 10.0.0.100@80@198.18.1.11 --router none --mapport 0`,
		Args:              a.serverArgs,
		ValidArgsFunction: a.targetCompletion(3, true, true),
	}, a.serverOp(api.ActionSet))
	serverFlags(set)
	set.Flags().Int64("weight", 0, "weight, 0..weightbound")
	set.MarkFlagsOneRequired("weight", "fixedweight", "advisorrequest", "advisorresponse", "mapport", "returnaddress", "router")

	simple := func(action, short, example string) *cobra.Command {
		return a.opCmd(&cobra.Command{
			Use:               action + " VIP@PORT@ADDR",
			Short:             short,
			Example:           example,
			Args:              a.targetArgs(3, targetOpts{}),
			ValidArgsFunction: a.targetCompletion(3, true, false),
		}, func(*cobra.Command, []string) api.Op {
			return api.Op{Object: api.ObjectServer, Action: action, Target: a.target}
		})
	}
	down := simple(api.ActionDown, "Mark servers down: established connections finish, new ones go elsewhere",
		`  dlbctl server down 10.0.0.100@80@10.1.1.5
  dlbctl server down @@10.1.1.5           # everywhere, for maintenance`)
	up := simple(api.ActionUp, "Mark servers up again, with the weight they had",
		`  dlbctl server up 10.0.0.100@80@10.1.1.5`)
	remove := simple(api.ActionRemove, "Remove servers from ports",
		`  dlbctl server remove 10.0.0.100@80@10.1.1.5`)

	return a.noun("server", "Add, set, take down, bring up, remove and report servers",
		`  dlbctl server add 10.0.0.100@80@10.1.1.5 --weight 5
  dlbctl server report 10.0.0.100@80@`,
		add, set, down, up, remove, a.serverReportCmd(), a.serverCheckCmd())
}

// serverNATHelp explains the server flags that apply to method nat ports.
const serverNATHelp = `On ports of method nat, dlbd rewrites addresses instead of forwarding
frames, so a server may listen on another port and sit on another subnet:

  --mapport PORT          the port the server listens on (0: the
                          cluster's port)
  --returnaddress ADDR    the source address NAT gives the connections it
                          makes to the server; dlbd puts it on the
                          executor's interface ("none" clears it)
  --router ADDR           the next hop to a server on another subnet
                          ("none" clears it: the server is on the link)`

// serverFlags adds the flags of "server add" and "server set" other than
// the weight.
func serverFlags(c *cobra.Command) {
	f := c.Flags()
	f.String("fixedweight", "", "yes: the manager never changes the weight")
	f.String("advisorrequest", "", "what this server's advisors send (e.g. an HTTP request line)")
	f.String("advisorresponse", "", "what this server's advisors expect in the reply")
	f.Int64("mapport", 0, "method nat: the server's port (0: the cluster's port)")
	f.String("returnaddress", "", "method nat: the source address of NAT's connections to the server, put on the executor's interface (none: clear)")
	f.String("router", "", "method nat: the next hop to a server on another subnet (none: clear)")
	_ = c.RegisterFlagCompletionFunc("fixedweight", fixedCompletion("yes", "no"))
}

// serverArgs checks the target, its keyword pairs and --fixedweight.
func (a *app) serverArgs(cmd *cobra.Command, args []string) error {
	if err := a.targetArgs(3, targetOpts{keywords: true})(cmd, args); err != nil {
		return err
	}
	_, err := yesNoFlag(cmd, "fixedweight")
	return err
}

// serverOp builds "server add" and "server set" operations. A bad
// --fixedweight is refused by the argument check first.
func (a *app) serverOp(action string) func(*cobra.Command, []string) api.Op {
	return func(cmd *cobra.Command, _ []string) api.Op {
		fixed, _ := yesNoFlag(cmd, "fixedweight")
		return api.Op{Object: api.ObjectServer, Action: action, Target: a.target, Weight: intFlag(cmd, "weight"),
			FixedWeight: fixed, AdvisorRequest: stringFlag(cmd, "advisorrequest"), AdvisorResponse: stringFlag(cmd, "advisorresponse"),
			MapPort: intFlag(cmd, "mapport"), ReturnAddress: stringFlag(cmd, "returnaddress"), Router: stringFlag(cmd, "router")}
	}
}

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Annotations: map[string]string{localCommand: "yes"},
		Use:         "version",
		Short:       "Print dlbctl's version",
		Example:     `  dlbctl version`,
		Args:        noArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "dlbctl %s (admin API %s)\n", buildVersion(), api.Version)
			return err
		}),
	}
}

// buildVersion is the version stamped at build time, else the module's.
func buildVersion() string {
	v := version
	if bi, ok := debug.ReadBuildInfo(); ok && v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	return v
}
