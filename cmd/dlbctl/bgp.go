package main

import (
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dlbproject/dlb/pkg/api"
)

// announceFlags adds the announcement flags of "cluster add" and "cluster
// set".
func announceFlags(c *cobra.Command) {
	f := c.Flags()
	f.String("announce", "", "yes: announce the cluster address over BGP while the cluster can take connections")
	f.StringArray("community", nil, "BGP community of the announcement: A:B, A:B:C (large) or no-export, no-advertise, ...; repeat or join with '+' (none: clear)")
	f.Int64("med", 0, "MED (multi-exit discriminator) of the announcement (0: none)")
	_ = c.RegisterFlagCompletionFunc("announce", fixedCompletion("yes", "no"))
}

// announceOp sets the announcement parameters the user gave.
func announceOp(cmd *cobra.Command, op *api.Op) {
	op.Announce, _ = yesNoFlag(cmd, "announce")
	if cmd.Flags().Changed("community") {
		op.Communities, _ = cmd.Flags().GetStringArray("community")
		if op.Communities == nil {
			op.Communities = []string{}
		}
	}
	op.MED = intFlag(cmd, "med")
}

func (a *app) bgpCmd() *cobra.Command {
	set := a.opCmd(&cobra.Command{
		Use:   "set [--asn N] [--routerid ADDR] [--listen-port PORT]",
		Short: "Configure the BGP speaker that announces cluster addresses",
		Long: `Configure the BGP speaker dlbd embeds (GoBGP). It announces each cluster
marked "cluster set VIP --announce yes" as a /32 (or /128) to its neighbours
while the executor is attached and one of the cluster's servers takes new
connections, and withdraws it otherwise. Routers that spread a cluster's
traffic over several dispatchers by ECMP then send each dispatcher its share;
every dispatcher picks the same server for a flow (Maglev tables built from
the same configuration are the same everywhere).

The first "bgp set" needs --asn and --routerid. The router id must be an
IPv4 address of this host (the nfa, usually). --listen-port 0 (the default)
makes outgoing sessions only; 179 also accepts sessions from routers.`,
		Example: `  dlbctl bgp set --asn 65001 --routerid 198.18.0.2
  dlbctl bgp set --listen-port 179`,
		Args: noArgs,
	}, func(cmd *cobra.Command, _ []string) api.Op {
		return api.Op{Object: api.ObjectBGP, Action: api.ActionSet, ASN: intFlag(cmd, "asn"),
			RouterID: stringFlag(cmd, "routerid"), ListenPort: intFlag(cmd, "listen-port")}
	})
	set.Flags().Int64("asn", 0, "this dispatcher's AS number (1..4294967294)")
	set.Flags().String("routerid", "", "BGP router id: an IPv4 address of this host")
	set.Flags().Int64("listen-port", 0, "TCP port to accept sessions on (0: outgoing sessions only)")
	set.MarkFlagsOneRequired("asn", "routerid", "listen-port")

	remove := a.opCmd(&cobra.Command{
		Use:     "remove",
		Short:   "Remove the BGP configuration: every announcement is withdrawn and the sessions closed",
		Example: `  dlbctl bgp remove`,
		Args:    noArgs,
	}, func(*cobra.Command, []string) api.Op {
		return api.Op{Object: api.ObjectBGP, Action: api.ActionRemove}
	})

	report := &cobra.Command{
		Use:   "report",
		Short: "Report the BGP sessions (state, uptime, prefixes sent and received, last error) and announcements",
		Example: `  dlbctl bgp report
  dlbctl bgp report -o json`,
		Args: noArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			r, err := a.client().BGP(cmd.Context())
			if err != nil {
				return err
			}
			return a.print(r, func(w io.Writer) { bgpTable(w, r) })
		}),
	}

	return a.noun("bgp", "Configure the BGP speaker, its neighbours, and report sessions and announcements",
		`  dlbctl bgp set --asn 65001 --routerid 198.18.0.2
  dlbctl bgp neighbor add 198.18.0.1 --remote-as 65000
  dlbctl cluster set 198.18.0.100 --announce yes
  dlbctl bgp report`,
		set, remove, a.neighborCmd(), report)
}

func (a *app) neighborCmd() *cobra.Command {
	neighborArgs := func(cmd *cobra.Command, args []string) error {
		if len(args) != 1 {
			return usagef("%s needs one neighbour address, got %d arguments", cmdName(cmd), len(args))
		}
		if _, err := netip.ParseAddr(args[0]); err != nil {
			return usagef("%s: %q is not an IP address", cmdName(cmd), args[0])
		}
		if cmd.Flags().Lookup("bfd") != nil {
			if _, err := yesNoFlag(cmd, "bfd"); err != nil {
				return err
			}
		}
		return nil
	}
	neighborOp := func(action string) func(*cobra.Command, []string) api.Op {
		return func(cmd *cobra.Command, args []string) api.Op {
			op := api.Op{Object: api.ObjectNeighbor, Action: action, Target: args[0],
				RemoteAS: intFlag(cmd, "remote-as"), PasswordFile: stringFlag(cmd, "password-file"),
				HoldTime: intFlag(cmd, "holdtime"), Multihop: intFlag(cmd, "multihop"), NeighborPort: intFlag(cmd, "port")}
			if cmd.Flags().Lookup("bfd") != nil {
				op.BFD, _ = yesNoFlag(cmd, "bfd")
			}
			return op
		}
	}
	flags := func(c *cobra.Command) *cobra.Command {
		f := c.Flags()
		f.Int64("remote-as", 0, "the router's AS number (equal to --asn: iBGP)")
		f.String("password-file", "", "file holding the session's TCP MD5 password (none: no password)")
		f.Int64("holdtime", 0, "hold time in seconds, 0 or 3..65535 (dlbd's default: 9); keepalives every third of it")
		f.Int64("multihop", 0, "TTL for a router that is not directly connected (0: directly connected)")
		f.Int64("port", 0, "the router's BGP port (0: 179)")
		f.String("bfd", "", "yes: BFD beside the session (200 ms x 3): the router drops a lost dispatcher within a second")
		_ = c.RegisterFlagCompletionFunc("bfd", fixedCompletion("yes", "no"))
		return c
	}
	add := a.opCmd(flags(&cobra.Command{
		Use:   "add ADDR --remote-as N [--password-file F] [--holdtime S] [--multihop TTL] [--bfd yes|no] [--port P]",
		Short: "Add a router to peer with",
		Example: `  dlbctl bgp neighbor add 198.18.0.1 --remote-as 65000
  dlbctl bgp neighbor add 2001:2::1 --remote-as 65000 --holdtime 3 --password-file /etc/dlb/bgp.pw
  dlbctl bgp neighbor add 198.18.0.1 --remote-as 65000 --bfd yes`,
		Args: neighborArgs,
	}), neighborOp(api.ActionAdd))
	_ = add.MarkFlagRequired("remote-as")
	set := a.opCmd(flags(&cobra.Command{
		Use:     "set ADDR [--remote-as N] [--password-file F] [--holdtime S] [--multihop TTL] [--bfd yes|no] [--port P]",
		Short:   "Change a neighbour's settings (its session restarts)",
		Example: `  dlbctl bgp neighbor set 198.18.0.1 --holdtime 30`,
		Args:    neighborArgs,
	}), neighborOp(api.ActionSet))
	set.MarkFlagsOneRequired("remote-as", "password-file", "holdtime", "multihop", "bfd", "port")
	remove := a.opCmd(&cobra.Command{
		Use:     "remove ADDR",
		Short:   "Remove a neighbour and close its session",
		Example: `  dlbctl bgp neighbor remove 198.18.0.1`,
		Args:    neighborArgs,
	}, neighborOp(api.ActionRemove))
	return a.noun("neighbor", "Add, change and remove the routers the BGP speaker peers with",
		`  dlbctl bgp neighbor add 198.18.0.1 --remote-as 65000`, add, set, remove)
}

// bgpTable shows the speaker, its sessions and the announcements.
func bgpTable(w io.Writer, r api.BGPReport) {
	if !r.Configured {
		fmt.Fprintf(w, "bgp:\tnot configured\n")
	} else {
		fmt.Fprintf(w, "asn:\t%d\nrouter id:\t%s\n", r.ASN, r.RouterID)
		listen := "none (outgoing sessions only)"
		if r.ListenPort != 0 {
			listen = fmt.Sprint(r.ListenPort)
		}
		fmt.Fprintf(w, "listen port:\t%s\nrunning:\t%s\n", listen, yesNo(r.Running))
	}
	if r.Error != "" {
		fmt.Fprintf(w, "error:\t%s\n", r.Error)
	}
	if len(r.Neighbors) > 0 {
		fmt.Fprintf(w, "\nNEIGHBOR\tREMOTE-AS\tSTATE\tUPTIME\tHOLDTIME\tBFD\tSENT\tRECEIVED\tLAST ERROR\n")
		for _, n := range r.Neighbors {
			up, hold := "-", fmt.Sprint(n.HoldTime)
			if n.State == "established" {
				up = fmt.Sprintf("%.0fs", n.UptimeSeconds)
				hold = fmt.Sprint(n.NegotiatedHoldTime)
			}
			last := n.LastError
			if last == "" {
				last = "-"
			}
			bfd := "-"
			if n.BFD {
				bfd = n.BFDState
				if bfd == "" {
					bfd = "down"
				}
			}
			fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", n.Address, n.RemoteAS, n.State, up, hold, bfd,
				n.PrefixesSent, n.PrefixesReceived, last)
		}
	}
	if len(r.Clusters) > 0 {
		fmt.Fprintf(w, "\nCLUSTER\tANNOUNCE\tANNOUNCED\tCOMMUNITIES\tMED\tREASON\n")
		for _, c := range r.Clusters {
			comms := strings.Join(c.Communities, ",")
			if comms == "" {
				comms = "-"
			}
			reason := c.Reason
			if reason == "" {
				reason = "-"
			}
			med := strconv.FormatUint(uint64(c.MED), 10)
			if c.Standby {
				med = fmt.Sprintf("%d (%d)", c.AnnouncedMED, c.MED)
				reason = "high-availability standby: announced with a higher MED, routers prefer the active"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Prefix, yesNo(c.Announce), yesNo(c.Announced), comms, med, reason)
		}
	}
}
