package main

import (
	"errors"
	"runtime"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dlbproject/dlb/pkg/backendsetup"
)

const backendSetupLong = `Prepare this host, a backend server, for direct server return: run it on
the backend, as root. It

  - sets the ARP sysctls arp_ignore=1 (answer ARP only for addresses of the
    interface asked on) and arp_announce=2 (never use a loopback address as
    the source of an ARP request) on "all", lo and --interface, so that the
    host never answers ARP for the cluster addresses: the dispatcher must;
  - adds each cluster address VIP to lo (IPv4 /32; IPv6 /128 without
    duplicate address detection), so that the host accepts the connections
    the dispatcher forwards to its MAC address, and answers from the VIP.

With --persist it also writes ` + backendsetup.SysctlFile + `
(the sysctls) and ` + backendsetup.UnitFile + `, a unit
that puts the addresses back on lo at boot, and enables it.

It is idempotent, and records what it changed in
` + backendsetup.RecordFile + `: --undo removes exactly that for the
VIPs given (an address or a sysctl that was already there is left alone),
and restores the sysctls and removes the files once no VIP is left.

Check the result from the dispatcher with "dlbctl server check".`

func (a *app) backendCmd() *cobra.Command {
	var o backendsetup.Options
	var undo bool
	setup := &cobra.Command{
		Use:   "setup VIP[+VIP...] [VIP...] [--interface IF] [--persist] [--undo]",
		Short: "Put cluster addresses on lo and set the ARP sysctls (run on a backend)",
		Long:  backendSetupLong,
		Example: `  dlbctl backend setup 198.18.0.100 --interface eth0
  dlbctl backend setup 198.18.0.100 2001:2::100 --interface eth0 --persist
  dlbctl backend setup 198.18.0.100+198.18.0.101    # as cluster add joins them
  dlbctl backend setup 198.18.0.100 --undo`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("backend setup needs at least one cluster address (VIP)")
			}
			o.VIPs = o.VIPs[:0]
			// Joined with '+' as in "cluster add" too.
			for _, arg := range args {
				for _, s := range strings.Split(arg, "+") {
					v, ok := literalAddr(s)
					if !ok {
						return usagef("backend setup: %q is not an IP address", s)
					}
					o.VIPs = append(o.VIPs, v)
				}
			}
			if undo && cmd.Flags().Changed("persist") {
				return usagef("backend setup: --undo and --persist do not go together (--undo removes persisted files too)")
			}
			return nil
		},
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			if runtime.GOOS != "linux" {
				return errors.New("backend setup runs on Linux backend servers only")
			}
			o.Out = cmd.OutOrStdout()
			if undo {
				return backendsetup.Undo(o)
			}
			return backendsetup.Setup(o)
		}),
	}
	f := setup.Flags()
	f.StringVar(&o.Interface, "interface", "", "the interface facing the dispatcher (its ARP sysctls are set too)")
	_ = setup.RegisterFlagCompletionFunc("interface", a.interfaceCompletion)
	f.BoolVar(&o.Persist, "persist", false, "also write a sysctl.d file and a systemd unit, so that it survives a reboot")
	f.BoolVar(&undo, "undo", false, "remove what earlier setups added for these VIPs")
	f.StringVar(&o.Root, "root", "", "prefix of the persisted files and the record (for images and tests)")
	_ = f.MarkHidden("root")

	c := a.noun("backend", "Prepare this host as a backend server (run on the backend)",
		`  dlbctl backend setup 198.18.0.100 --interface eth0 --persist`, setup)
	c.Annotations = map[string]string{localCommand: "yes"}
	return c
}
