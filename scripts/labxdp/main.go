// Command labxdp attaches a pass-through XDP program (return XDP_PASS), in
// native mode, to interfaces of the current network namespace and pins the
// links under a bpffs directory, so that they outlive the command; removing
// the directory detaches them. It is a lab tool.
//
// Why: a veth that receives frames another veth sent with native-mode
// XDP_TX only processes them if it runs an XDP program itself (the sender
// kicks the receiver's NAPI only then). The lab gives the dispatcher's
// switch-side peer this program so that dlbd's native mode works in the
// lab as it does on a real NIC. The program is built from instructions, so
// no compiler is needed.
//
// Usage: labxdp -pin DIR IFNAME...
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
)

func main() {
	pin := flag.String("pin", "", "bpffs directory to pin the links in (required)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: labxdp -pin DIR IFNAME...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *pin == "" || flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*pin, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "labxdp:", err)
		os.Exit(1)
	}
}

func run(pin string, ifaces []string) error {
	if err := rlimit.RemoveMemlock(); err != nil {
		return err
	}
	if err := os.MkdirAll(pin, 0o700); err != nil {
		return err
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "lab_xdp_pass",
		Type:         ebpf.XDP,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2 /* XDP_PASS */), asm.Return()},
	})
	if err != nil {
		return fmt.Errorf("loading the pass program: %w", err)
	}
	defer prog.Close()
	for _, name := range ifaces {
		ifc, err := net.InterfaceByName(name)
		if err != nil {
			return fmt.Errorf("looking up %s: %w", name, err)
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifc.Index, Flags: link.XDPDriverMode})
		if err != nil {
			return fmt.Errorf("attaching to %s: %w", name, err)
		}
		err = l.Pin(filepath.Join(pin, "link_"+name))
		l.Close()
		if err != nil {
			return fmt.Errorf("pinning the link of %s: %w", name, err)
		}
	}
	return nil
}
