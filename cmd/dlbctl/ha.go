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

// addrArg checks that an argument is an IP address.
func addrArg(cmd *cobra.Command, what, s string) error {
	if _, err := netip.ParseAddr(s); err != nil {
		return usagef("%s: %s %q is not an IP address", cmdName(cmd), what, s)
	}
	return nil
}

// roleArg checks that an argument is a high-availability role.
func roleArg(cmd *cobra.Command, s string) error {
	switch strings.ToLower(s) {
	case "primary", "backup", "both":
		return nil
	}
	return usagef("%s: role %q is not primary, backup or both", cmdName(cmd), s)
}

// recoveryArg checks that an argument is a recovery strategy.
func recoveryArg(cmd *cobra.Command, s string) error {
	switch strings.ToLower(s) {
	case "auto", "manual":
		return nil
	}
	return usagef("%s: recovery strategy %q is not auto or manual", cmdName(cmd), s)
}

// haCmd is "dlbctl highavailability": dscontrol's grammar.
func (a *app) haCmd() *cobra.Command {
	hbAdd := a.opCmd(&cobra.Command{
		Use:   "add SOURCE DESTINATION [--secret-file F] [--interval MS] [--count N]",
		Short: "Send heartbeats from an address of this dispatcher to the peer's",
		Long: `Add a heartbeat path: heartbeats go from SOURCE (an address of this host)
to DESTINATION (the peer dispatcher's) on the backup's port, every
--interval milliseconds (default 500); the peer is dead after --count
intervals without one (default 4: 2 s). Heartbeats and replication are
authenticated with the secret in --secret-file (at least 8 bytes), which
both dispatchers share. The secret file, interval and count are shared by
every path: give them with the first, change them with "heartbeat set".`,
		Example: `  dlbctl highavailability heartbeat add 198.18.0.2 198.18.0.4 --secret-file /etc/dlb/ha.secret
  dlbctl highavailability heartbeat add 198.18.5.2 198.18.5.4      # a second path, another network`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usagef("%s needs SOURCE and DESTINATION, got %d arguments", cmdName(cmd), len(args))
			}
			if err := addrArg(cmd, "source", args[0]); err != nil {
				return err
			}
			return addrArg(cmd, "destination", args[1])
		},
	}, func(cmd *cobra.Command, args []string) api.Op {
		return api.Op{Object: api.ObjectHeartbeat, Action: api.ActionAdd, Target: args[1], Source: &args[0],
			SecretFile: stringFlag(cmd, "secret-file"), Interval: msFlag(cmd), Count: intFlag(cmd, "count")}
	})
	hbFlags := func(c *cobra.Command) {
		c.Flags().String("secret-file", "", "file holding the secret both dispatchers share (at least 8 bytes)")
		c.Flags().Int64("interval", 0, "heartbeat interval in milliseconds (dlbd's default: 500)")
		c.Flags().Int64("count", 0, "intervals without a heartbeat after which the peer is dead (dlbd's default: 4)")
	}
	hbFlags(hbAdd)
	hbSet := a.opCmd(&cobra.Command{
		Use:     "set [--secret-file F] [--interval MS] [--count N]",
		Short:   "Change the heartbeats' shared secret, interval or count",
		Example: `  dlbctl highavailability heartbeat set --interval 200 --count 5`,
		Args:    noArgs,
	}, func(cmd *cobra.Command, _ []string) api.Op {
		return api.Op{Object: api.ObjectHeartbeat, Action: api.ActionSet, SecretFile: stringFlag(cmd, "secret-file"),
			Interval: msFlag(cmd), Count: intFlag(cmd, "count")}
	})
	hbFlags(hbSet)
	hbSet.MarkFlagsOneRequired("secret-file", "interval", "count")
	hbRemove := a.opCmd(&cobra.Command{
		Use:   "remove [SOURCE] DESTINATION [--source SOURCE]",
		Short: "Stop sending heartbeats to an address of the peer",
		Long: `Stop sending heartbeats to an address of the peer: every path to
DESTINATION, or only the one from SOURCE, given as in "heartbeat add" or
with --source.`,
		Example: `  dlbctl highavailability heartbeat remove 198.18.0.4
  dlbctl highavailability heartbeat remove 198.18.0.2 198.18.0.4   # the path from 198.18.0.2 only`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 || len(args) > 2 {
				return usagef("%s needs [SOURCE] DESTINATION, got %d arguments", cmdName(cmd), len(args))
			}
			if len(args) == 2 {
				if cmd.Flags().Changed("source") {
					return usagef("%s: the source is given twice (%s and --source)", cmdName(cmd), args[0])
				}
				if err := cmd.Flags().Set("source", args[0]); err != nil {
					return usagef("%s: %v", cmdName(cmd), err)
				}
			}
			if s := stringFlag(cmd, "source"); s != nil {
				if err := addrArg(cmd, "source", *s); err != nil {
					return err
				}
			}
			return addrArg(cmd, "destination", args[len(args)-1])
		},
	}, func(cmd *cobra.Command, args []string) api.Op {
		return api.Op{Object: api.ObjectHeartbeat, Action: api.ActionRemove, Target: args[len(args)-1], Source: stringFlag(cmd, "source")}
	})
	hbRemove.Flags().String("source", "", "only the path from this source")
	heartbeat := a.noun("heartbeat", "Add, set and remove heartbeat paths to the peer dispatcher",
		`  dlbctl highavailability heartbeat add 198.18.0.2 198.18.0.4 --secret-file /etc/dlb/ha.secret`,
		hbAdd, hbSet, hbRemove)

	bkAdd := a.opCmd(&cobra.Command{
		Use:   "add primary|backup|both auto|manual PORT",
		Short: "Give this dispatcher its role, its recovery strategy and the port of high availability",
		Long: `Give this dispatcher its role in the pair: primary (the preferred active),
backup (stands by for the primary) or both (mutual high availability: each
dispatcher is the preferred active for the clusters whose primaryhost is its
own heartbeat address; see "cluster set VIP --primaryhost"). The recovery
strategy says what the preferred dispatcher does when it comes back while
its peer is active: auto takes its clusters back once it has a full copy of
the connection tables (no connection is broken); manual waits for
"highavailability takeover". PORT carries heartbeats (UDP) and the
replication of connection tables (TCP) on both dispatchers.`,
		Example: `  dlbctl highavailability backup add primary auto 12345
  dlbctl highavailability backup add backup auto 12345     # on the other dispatcher`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 3 {
				return usagef("%s needs ROLE, RECOVERY and PORT, got %d arguments", cmdName(cmd), len(args))
			}
			if err := roleArg(cmd, args[0]); err != nil {
				return err
			}
			if err := recoveryArg(cmd, args[1]); err != nil {
				return err
			}
			if p, err := strconv.ParseInt(args[2], 10, 64); err != nil || p < 1 || p > 65535 {
				return usagef("%s: port %q is not in 1..65535", cmdName(cmd), args[2])
			}
			return nil
		},
	}, func(_ *cobra.Command, args []string) api.Op {
		port, _ := strconv.ParseInt(args[2], 10, 64)
		role, rec := strings.ToLower(args[0]), strings.ToLower(args[1])
		return api.Op{Object: api.ObjectBackup, Action: api.ActionAdd, Role: &role, Recovery: &rec, HAPort: &port}
	})
	bkSet := a.opCmd(&cobra.Command{
		Use:   "set [--role primary|backup|both] [--recovery auto|manual] [--port PORT]",
		Short: "Change this dispatcher's role, recovery strategy or port of high availability",
		Long: `Change this dispatcher's role, recovery strategy or port of high
availability while it runs: the groups it serves stay served (a new role
decides them anew, a new port binds the heartbeats and the replication
again). Removing the backup and adding it again would stop high
availability in between.`,
		Example: `  dlbctl highavailability backup set --recovery manual
  dlbctl highavailability backup set --port 12346     # on both dispatchers`,
		Args: func(cmd *cobra.Command, args []string) error {
			if err := noArgs(cmd, args); err != nil {
				return err
			}
			if r := stringFlag(cmd, "role"); r != nil {
				if err := roleArg(cmd, *r); err != nil {
					return err
				}
			}
			if r := stringFlag(cmd, "recovery"); r != nil {
				if err := recoveryArg(cmd, *r); err != nil {
					return err
				}
			}
			if p := intFlag(cmd, "port"); p != nil && (*p < 1 || *p > 65535) {
				return usagef("%s: port %d is not in 1..65535", cmdName(cmd), *p)
			}
			return nil
		},
	}, func(cmd *cobra.Command, _ []string) api.Op {
		lower := func(p *string) *string {
			if p != nil {
				*p = strings.ToLower(*p)
			}
			return p
		}
		return api.Op{Object: api.ObjectBackup, Action: api.ActionSet, Role: lower(stringFlag(cmd, "role")),
			Recovery: lower(stringFlag(cmd, "recovery")), HAPort: intFlag(cmd, "port")}
	})
	bkSet.Flags().String("role", "", "primary, backup or both")
	bkSet.Flags().String("recovery", "", "auto or manual")
	bkSet.Flags().Int64("port", 0, "the port of heartbeats (UDP) and replication (TCP)")
	bkSet.MarkFlagsOneRequired("role", "recovery", "port")
	bkRemove := a.opCmd(&cobra.Command{
		Use:   "remove",
		Short: "Stop high availability on this dispatcher (it then serves every cluster)",
		Long: `Stop high availability on this dispatcher: it then serves every cluster.
Refused while the peer is heard and its executor forwards, and this
dispatcher's executor is started: both dispatchers would serve the
clusters (this one at once, the peer once the heartbeats stop). Stop the
executor on one of the two first (executor stop), or stop dlbd there;
to change the role, recovery strategy or port, use "backup set".`,
		Example: `  dlbctl highavailability backup remove`,
		Args:    noArgs,
	}, func(*cobra.Command, []string) api.Op {
		return api.Op{Object: api.ObjectBackup, Action: api.ActionRemove}
	})
	backup := a.noun("backup", "Add, change or remove this dispatcher's role in a high-availability pair",
		`  dlbctl highavailability backup add primary auto 12345`, bkAdd, bkSet, bkRemove)

	reachOp := func(action, short, example string) *cobra.Command {
		return a.opCmd(&cobra.Command{
			Use:     action + " ADDRESS[+ADDRESS...]",
			Short:   short,
			Example: example,
			Args: func(cmd *cobra.Command, args []string) error {
				if len(args) != 1 {
					return usagef("%s needs one ADDRESS[+ADDRESS...], got %d arguments", cmdName(cmd), len(args))
				}
				for _, s := range strings.Split(args[0], "+") {
					if err := addrArg(cmd, "address", s); err != nil {
						return err
					}
				}
				return nil
			},
		}, func(_ *cobra.Command, args []string) api.Op {
			return api.Op{Object: api.ObjectReach, Action: action, Target: args[0]}
		})
	}
	reach := a.noun("reach", "Add or remove reach targets: addresses both dispatchers ping; the one that reaches more is the better active",
		`  dlbctl highavailability reach add 198.18.0.254`,
		reachOp(api.ActionAdd, "Ping an address (a router, a gateway of the clients) to judge which dispatcher is the better active",
			`  dlbctl highavailability reach add 198.18.0.254+198.18.0.253`),
		reachOp(api.ActionRemove, "Stop pinging a reach target", `  dlbctl highavailability reach remove 198.18.0.253`))

	status := &cobra.Command{
		Use:   "status",
		Short: "Report role, state, peer, heartbeats, reach targets, replication and configuration digests",
		Example: `  dlbctl highavailability status
  dlbctl highavailability status -o json`,
		Args: noArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			r, err := a.client().HA(cmd.Context())
			if err != nil {
				return err
			}
			return a.print(r, func(w io.Writer) { haTable(w, r) })
		}),
	}
	takeover := &cobra.Command{
		Use:   "takeover [ADDRESS]",
		Short: "Make this standby dispatcher take over its peer's clusters",
		Long: `Make this dispatcher, standing by, take over: the active peer takes its
cluster and return addresses off its interface and sends its last
connection entries, then this dispatcher puts them on its own and
announces them. Under mutual high availability, ADDRESS (a heartbeat
address of either dispatcher) chooses the clusters: those whose
primaryhost it is; without it, all of them. Recovery manual needs it to
give the preferred dispatcher its clusters back.`,
		Example: `  dlbctl highavailability takeover
  dlbctl highavailability takeover 198.18.0.4`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("%s takes at most one ADDRESS, got %d arguments", cmdName(cmd), len(args))
			}
			if len(args) == 1 {
				return addrArg(cmd, "address", args[0])
			}
			return nil
		},
		RunE: a.runE(func(cmd *cobra.Command, args []string) error {
			addr := ""
			if len(args) == 1 {
				addr = args[0]
			}
			res, err := a.client().Takeover(cmd.Context(), addr)
			if err != nil {
				return err
			}
			fmt.Fprintln(a.env.stdout, "takeover asked: see \"dlbctl highavailability status\"")
			a.warnings(res.Warnings)
			return nil
		}),
	}
	c := a.noun("highavailability", "Configure and report high availability: heartbeats, role, reach targets, takeover",
		`  dlbctl highavailability backup add primary auto 12345
  dlbctl highavailability heartbeat add 198.18.0.2 198.18.0.4 --secret-file /etc/dlb/ha.secret
  dlbctl highavailability reach add 198.18.0.254
  dlbctl highavailability status`,
		heartbeat, backup, reach, status, takeover)
	c.Aliases = []string{"ha"}
	return c
}

// msFlag returns --interval (milliseconds) as the wire carries it.
func msFlag(cmd *cobra.Command) *float64 {
	v := intFlag(cmd, "interval")
	if v == nil {
		return nil
	}
	f := float64(*v)
	return &f
}

func haTable(w io.Writer, r api.HAReport) {
	if !r.Configured {
		fmt.Fprintln(w, "high availability:\tnot configured")
		return
	}
	run := "running"
	if !r.Running {
		run = "not running"
		if r.Error != "" {
			run += ": " + r.Error
		}
	}
	if r.Recovery == "" {
		fmt.Fprintf(w, "role:\t%s (%s)\n", r.Role, run)
	} else {
		fmt.Fprintf(w, "role:\t%s, recovery %s, port %d (%s)\n", r.Role, r.Recovery, r.Port, run)
	}
	health := "executor forwarding"
	switch {
	case !r.Healthy && r.HealthReason != "":
		health = "executor not forwarding: " + r.HealthReason
	case !r.Healthy:
		health = "not checked (high availability is not running)"
	}
	fmt.Fprintf(w, "this dispatcher:\t%s\n", health)
	for i, g := range r.Groups {
		peer := "-"
		if i < len(r.Peer.States) {
			peer = r.Peer.States[i]
			if !r.Peer.Alive { // its last word, not its state now
				peer = "dead (last heard " + peer + ")"
			}
		}
		fmt.Fprintf(w, "state (%s clusters):\t%s since %s, peer %s\n", g.Group, strings.ToUpper(g.State), g.Since, peer)
		if len(g.Clusters) > 0 {
			fmt.Fprintf(w, "  clusters:\t%s\n", someAddresses(g.Clusters, " "))
		}
		// Why it changed then, which may no longer hold ("no peer heard"
		// with the peer heard since): on one line with the state, it read
		// as the reason now.
		if g.Reason != "" {
			fmt.Fprintf(w, "  changed because:\t%s\n", g.Reason)
		}
	}
	p := r.Peer
	switch {
	case !p.Heard:
		fmt.Fprintln(w, "peer:\tnever heard")
	default:
		alive := "alive"
		if !p.Alive {
			alive = "DEAD"
		}
		if p.Restarting {
			alive += " (restarting)"
		}
		fmt.Fprintf(w, "peer:\t%s, %s %s, heard %.1fs ago, healthy %v, reaches %d of %d\n", alive, p.Role, p.Recovery, p.SecondsAgo, p.Healthy, p.Reach, p.Targets)
		if p.Conflict != "" {
			fmt.Fprintf(w, "  CONFLICT:\t%s\n", p.Conflict)
		}
	}
	match := "differs from the peer's"
	if r.DigestMatch {
		match = "same as the peer's"
	} else if !p.Alive {
		match = "peer not heard"
	}
	fmt.Fprintf(w, "config digest:\t%s (%s)\n", r.Digest, match)
	rp := r.Replication
	fmt.Fprintf(w, "replication:\tsending %v, receiving %v, synced %v, sent %d, received %d, imported %d, lag %.1f ms\n",
		rp.Sending, rp.Receiving, rp.Synced, rp.SentRecords, rp.ReceivedRecords, rp.Imported, rp.LagMS)
	if rp.Merged+rp.Kept > 0 {
		fmt.Fprintf(w, "merged:	%d records of connections the peer made while both served written, %d not (held here already: the same connection, or another used since)\n",
			rp.Merged, rp.Kept)
	}
	if len(r.Refused) > 0 {
		fmt.Fprintf(w, "refused:\t%s\n", byReason(r.Refused))
	}
	if r.PeerPort != 0 {
		fmt.Fprintf(w, "port:\tthe peer uses port %d: heartbeats go to both ports, replication to %d, until it uses %d too\n",
			r.PeerPort, r.PeerPort, r.Port)
	}
	if r.SecretPending {
		fmt.Fprintln(w, "secret:\tthe peer was last heard with another shared secret: heartbeats go under both until it has this one")
	}
	if r.SecretError != "" {
		fmt.Fprintf(w, "secret file:\t%s (the secret read before stays in use)\n", r.SecretError)
	}
	for _, h := range r.Stray {
		fmt.Fprintf(w, "stray path:\tthe peer's heartbeats arrive from %s to %s, a path not configured here (%d, the last %.1fs ago): %s\n",
			h.Destination, h.Source, h.Received, h.SecondsAgo, strayRemedy(h))
	}
	fmt.Fprintf(w, "\nHEARTBEAT\tSENT\tRECEIVED\tLAST_HEARD\tERROR\n")
	for _, h := range r.Heartbeats {
		last := "-"
		if h.SecondsAgo > 0 || h.Received > 0 {
			last = fmt.Sprintf("%.1fs", h.SecondsAgo)
		}
		fmt.Fprintf(w, "%s -> %s\t%d\t%d\t%s\t%s\n", h.Source, h.Destination, h.Sent, h.Received, last, h.Error)
	}
	if len(r.Reach) > 0 {
		fmt.Fprintf(w, "\nREACH\tREACHABLE\tLAST_ERROR\n")
		for _, t := range r.Reach {
			fmt.Fprintf(w, "%s\t%v\t%s\n", t.Address, t.Reachable, t.LastError)
		}
	}
}

// strayRemedy says how to give both dispatchers the path the peer's
// heartbeats arrive on (h, as this dispatcher names paths).
func strayRemedy(h api.HAHeartbeatReport) string {
	return fmt.Sprintf("give both dispatchers the same paths (here: dlbctl highavailability heartbeat add %s %s; or change it back on the peer)",
		h.Source, h.Destination)
}
