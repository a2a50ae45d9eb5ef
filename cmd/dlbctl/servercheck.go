package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dlbproject/dlb/pkg/api"
)

const serverCheckLong = `Check from the dispatcher that a backend server is ready for direct server
return. dlbd probes it with raw frames on the executor's interface, from the
dispatcher's NFA, and reports each check with pass or fail and the fix:

  arp-server    the server answers ARP for its own address (it is on the
                dispatcher's link)
  arp-cluster   it does not answer ARP for the cluster address (arp_ignore)
  accept        it accepts a connection to VIP:PORT when the frame is sent
                to its MAC address, as the executor forwards it: a SYN that
                must be answered with a SYN-ACK (the VIP is on its lo and
                the service listens on it)
  reply-source  the reply comes from the cluster address
  mtu           the MSS it advertises fits the interface's MTU
  rp-filter     with --client ADDR, it also answers a SYN from that client
                address: its reverse-path filter lets clients in. ADDR must
                be held by no host on the dispatcher's link: the dispatcher
                answers ARP for it while the probe lasts (an address a host
                there holds is skipped, saying so: the server answers that
                host out of the dispatcher's sight). A reply the
                server routes through another router cannot be seen from
                the dispatcher, and then this check fails too.

An IPv6 server is checked from the IPv6 NFA, with neighbour solicitations
for ARP; rp-filter is skipped (IPv6 has no rp_filter). The exit status is
1 when a check failed.
Prepare a server with "dlbctl backend setup" on it.`

func (a *app) serverCheckCmd() *cobra.Command {
	var clientAddr string
	c := &cobra.Command{
		Use:   "check VIP@PORT@SERVER [--client ADDR]",
		Short: "Check from the dispatcher that a server is ready for direct server return",
		Long:  serverCheckLong,
		Example: `  dlbctl server check 198.18.0.100@80@198.18.0.21
  dlbctl server check 198.18.0.100@80@198.18.0.21 --client 203.0.113.7 -o json`,
		Args:              target("VIP@PORT@SERVER", false),
		ValidArgsFunction: a.targetCompletion(3, true, false),
		RunE: a.runE(func(cmd *cobra.Command, args []string) error {
			r, err := a.client().ServerCheck(cmd.Context(), args[0], clientAddr)
			if err != nil {
				return err
			}
			if r.Checks == nil {
				r.Checks = []api.ServerCheck{}
			}
			if err := a.print(r, func(w io.Writer) { serverCheckTable(w, r) }); err != nil {
				return err
			}
			if !r.OK {
				failed := 0
				for _, c := range r.Checks {
					if c.Result == api.CheckFail {
						failed++
					}
				}
				return fmt.Errorf("server check %s: %d of %d checks failed", args[0], failed, len(r.Checks))
			}
			return nil
		}),
	}
	c.Flags().StringVar(&clientAddr, "client", "", "also probe from this client address, held by no host on the link (the server's reverse-path filter)")
	return c
}

func serverCheckTable(w io.Writer, r api.ServerCheckReport) {
	fmt.Fprintf(w, "server check %s from %s on %s", r.Target, r.Source, r.Interface)
	if r.ServerMAC != "" {
		fmt.Fprintf(w, " (server at %s)", r.ServerMAC)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "CHECK\tRESULT\tDETAIL")
	for _, c := range r.Checks {
		fmt.Fprintf(w, "%s\t%s\t%s\n", c.Name, strings.ToUpper(c.Result), c.Detail)
		if c.Fix != "" {
			fmt.Fprintf(w, "\tfix:\t%s\n", c.Fix)
		}
	}
}
