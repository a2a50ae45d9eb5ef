// Package backendsetup prepares a backend server for direct server return
// (what "dlbctl backend setup" runs on a backend host): the cluster
// addresses on the loopback interface, and the ARP sysctls that keep the
// host from answering ARP for them (arp_ignore=1) and from using them as
// the source of its own ARP requests (arp_announce=2). With Persist it
// writes a sysctl.d file and a systemd unit so that both survive a reboot.
//
// Everything it changes is recorded, so that Undo removes exactly what
// Setup added: an address that was already on lo, or a sysctl that already
// had the value, is left alone both ways. Running Setup twice changes
// nothing the second time.
//
// It shells out to ip(8) and writes /proc/sys, so that dlbctl needs no
// netlink library. The sysctls it writes are those of the network namespace
// it runs in.
package backendsetup

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/renameio/v2"
)

// Default paths, under Options.Root.
const (
	// RecordFile keeps what Setup changed.
	RecordFile = "/var/lib/dlb-backend/record.json"
	// SysctlFile holds the persisted ARP sysctls.
	SysctlFile = "/etc/sysctl.d/60-dlb-backend.conf"
	// UnitFile is the systemd unit that puts the addresses back on lo at
	// boot, and WantsLink enables it.
	UnitFile  = "/etc/systemd/system/dlb-backend.service"
	WantsLink = "/etc/systemd/system/multi-user.target.wants/dlb-backend.service"
)

// Options say what to set up and where.
type Options struct {
	// VIPs are the cluster addresses.
	VIPs []netip.Addr
	// Interface is the interface facing the dispatcher; its ARP sysctls
	// are set too ("all" and lo are always set).
	Interface string
	// Persist writes SysctlFile and UnitFile (and enables the unit).
	Persist bool
	// Root prefixes the persisted files and the record ("" is /).
	Root string
	// ProcSys is where sysctls are written (default /proc/sys).
	ProcSys string
	// IP is the ip(8) command (default "ip").
	IP string
	// Out receives one line per action.
	Out io.Writer
}

// Record is what earlier setups changed, kept in RecordFile.
type Record struct {
	// Addresses are the addresses (prefix form) Setup added to lo.
	Addresses []string `json:"addresses,omitempty"`
	// Sysctls are the sysctls Setup changed, with their old values.
	Sysctls []SysctlChange `json:"sysctls,omitempty"`
	// Persisted are the VIPs in the persisted files, and Interface the
	// interface whose sysctls they set.
	Persisted []string `json:"persisted,omitempty"`
	Interface string   `json:"interface,omitempty"`
	// Files are the files Setup wrote.
	Files []string `json:"files,omitempty"`
}

// SysctlChange is one sysctl Setup changed.
type SysctlChange struct {
	Key string `json:"key"` // e.g. net/ipv4/conf/all/arp_ignore
	Old string `json:"old"`
	New string `json:"new"`
}

// arpSysctls are the values direct server return needs on every
// interface the VIPs could be answered on.
var arpSysctls = []struct{ name, value string }{{"arp_ignore", "1"}, {"arp_announce", "2"}}

func (o *Options) defaults() error {
	if o.ProcSys == "" {
		o.ProcSys = "/proc/sys"
	}
	if o.IP == "" {
		o.IP = "ip"
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if len(o.VIPs) == 0 {
		return errors.New("no cluster address given")
	}
	for _, v := range o.VIPs {
		if !v.IsValid() || v.IsUnspecified() || v.IsLoopback() || v.IsMulticast() || v.IsLinkLocalUnicast() || v.Zone() != "" {
			return fmt.Errorf("cluster address %v: not a unicast address a backend can carry on lo", v)
		}
	}
	if o.Interface != "" {
		if o.Interface == "lo" || o.Interface == "all" || o.Interface == "default" || strings.ContainsAny(o.Interface, "/ \t\n") {
			return fmt.Errorf("--interface %q: not an interface name", o.Interface)
		}
		if _, err := os.Stat(filepath.Join(o.ProcSys, "net/ipv4/conf", o.Interface)); err != nil {
			return fmt.Errorf("--interface %s: no such interface here", o.Interface)
		}
	}
	return nil
}

// Setup adds the VIPs to lo and sets the ARP sysctls, recording what it
// changed; with Persist it also writes the boot-time files.
func Setup(o Options) error {
	if err := o.defaults(); err != nil {
		return err
	}
	rec, err := loadRecord(o.Root)
	if err != nil {
		return err
	}
	have, err := loAddresses(o.IP)
	if err != nil {
		return err
	}
	// Sysctls first: a VIP must never be on lo while the host still
	// answers ARP for it.
	if hasV4(o.VIPs) {
		for _, dev := range sysctlDevs(o.Interface) {
			for _, s := range arpSysctls {
				key := "net/ipv4/conf/" + dev + "/" + s.name
				old, err := readSysctl(o.ProcSys, key)
				if err != nil {
					return err
				}
				if old == s.value {
					fmt.Fprintf(o.Out, "%s is already %s\n", dotted(key), s.value)
					continue
				}
				if err := writeSysctl(o.ProcSys, key, s.value); err != nil {
					return err
				}
				if !slices.ContainsFunc(rec.Sysctls, func(c SysctlChange) bool { return c.Key == key }) {
					rec.Sysctls = append(rec.Sysctls, SysctlChange{Key: key, Old: old, New: s.value})
				}
				fmt.Fprintf(o.Out, "%s: %s -> %s\n", dotted(key), old, s.value)
				if err := saveRecord(o.Root, rec); err != nil {
					return err
				}
			}
		}
	}
	for _, v := range o.VIPs {
		p := hostPrefix(v)
		if have[p] {
			fmt.Fprintf(o.Out, "%s is already on lo\n", p)
			continue
		}
		args := []string{"addr", "add", p, "dev", "lo"}
		if v.Is6() {
			args = append(args, "nodad")
		}
		if err := run(o.IP, args...); err != nil {
			return fmt.Errorf("adding %s to lo: %w", p, err)
		}
		rec.Addresses = append(rec.Addresses, p)
		fmt.Fprintf(o.Out, "added %s to lo\n", p)
		if err := saveRecord(o.Root, rec); err != nil {
			return err
		}
	}
	if o.Persist {
		for _, v := range o.VIPs {
			if !slices.Contains(rec.Persisted, hostPrefix(v)) {
				rec.Persisted = append(rec.Persisted, hostPrefix(v))
			}
		}
		if o.Interface != "" {
			rec.Interface = o.Interface
		}
		if err := writePersisted(o, &rec); err != nil {
			return err
		}
		if err := saveRecord(o.Root, rec); err != nil {
			return err
		}
	}
	return nil
}

// Undo removes, of the VIPs given, the addresses Setup added and drops
// them from the persisted files; when no recorded VIP remains it restores
// the sysctls Setup changed and removes the files it wrote.
func Undo(o Options) error {
	if err := o.defaults(); err != nil {
		return err
	}
	rec, err := loadRecord(o.Root)
	if err != nil {
		return err
	}
	have, err := loAddresses(o.IP)
	if err != nil {
		return err
	}
	for _, v := range o.VIPs {
		p := hostPrefix(v)
		i := slices.Index(rec.Addresses, p)
		switch {
		case i < 0 && have[p]:
			fmt.Fprintf(o.Out, "%s was on lo before dlbctl backend setup: left there\n", p)
		case i < 0:
			fmt.Fprintf(o.Out, "%s is not on lo\n", p)
		default:
			if have[p] {
				if err := run(o.IP, "addr", "del", p, "dev", "lo"); err != nil {
					return fmt.Errorf("removing %s from lo: %w", p, err)
				}
				fmt.Fprintf(o.Out, "removed %s from lo\n", p)
			}
			rec.Addresses = slices.Delete(rec.Addresses, i, i+1)
		}
		if j := slices.Index(rec.Persisted, p); j >= 0 {
			rec.Persisted = slices.Delete(rec.Persisted, j, j+1)
		}
		if err := saveRecord(o.Root, rec); err != nil {
			return err
		}
	}
	if len(rec.Persisted) > 0 {
		if err := writePersisted(o, &rec); err != nil {
			return err
		}
	} else {
		// Nothing persisted is left: the files go.
		for _, f := range rec.Files {
			if err := os.Remove(filepath.Join(o.Root, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("removing %s: %w", f, err)
			}
			fmt.Fprintf(o.Out, "removed %s\n", f)
		}
		rec.Files = nil
		rec.Interface = ""
	}
	if len(rec.Addresses) > 0 || len(rec.Persisted) > 0 {
		return saveRecord(o.Root, rec)
	}
	// Nothing of ours is left: restore the sysctls, drop the record.
	for i := len(rec.Sysctls) - 1; i >= 0; i-- {
		c := rec.Sysctls[i]
		cur, err := readSysctl(o.ProcSys, c.Key)
		if err != nil {
			return err
		}
		if cur != c.New {
			fmt.Fprintf(o.Out, "%s is %s, set by someone else since: left as it is\n", dotted(c.Key), cur)
		} else {
			if err := writeSysctl(o.ProcSys, c.Key, c.Old); err != nil {
				return err
			}
			fmt.Fprintf(o.Out, "%s: %s -> %s (restored)\n", dotted(c.Key), cur, c.Old)
		}
		rec.Sysctls = rec.Sysctls[:i]
		if err := saveRecord(o.Root, rec); err != nil {
			return err
		}
	}
	path := filepath.Join(o.Root, RecordFile)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the record %s: %w", path, err)
	}
	_ = os.Remove(filepath.Dir(path)) // only if empty
	return nil
}

// writePersisted writes the sysctl.d file and the unit for rec.Persisted,
// or removes them when it is empty.
func writePersisted(o Options, rec *Record) error {
	var sysctl strings.Builder
	sysctl.WriteString("# Written by \"dlbctl backend setup --persist\"; removed by --undo.\n" +
		"# Direct server return: never answer ARP for the cluster addresses on lo\n" +
		"# (arp_ignore=1), never use them as the source of ARP requests\n# (arp_announce=2).\n")
	for _, dev := range sysctlDevs(rec.Interface) {
		for _, s := range arpSysctls {
			fmt.Fprintf(&sysctl, "net.ipv4.conf.%s.%s = %s\n", dev, s.name, s.value)
		}
	}
	var unit strings.Builder
	unit.WriteString("# Written by \"dlbctl backend setup --persist\"; removed by --undo.\n" +
		"[Unit]\nDescription=dlb backend: cluster addresses on lo (direct server return)\n" +
		"Documentation=man:dlbctl-backend-setup(1)\nDefaultDependencies=no\n" +
		"After=systemd-sysctl.service network-pre.target\nWants=network-pre.target\nBefore=network.target\n\n" +
		"[Service]\nType=oneshot\nRemainAfterExit=yes\n")
	for _, p := range rec.Persisted {
		extra := ""
		if strings.Contains(p, ":") {
			extra = " nodad"
		}
		fmt.Fprintf(&unit, "ExecStart=/sbin/ip addr replace %s dev lo%s\n", p, extra)
	}
	for _, p := range rec.Persisted {
		fmt.Fprintf(&unit, "ExecStop=-/sbin/ip addr del %s dev lo\n", p)
	}
	unit.WriteString("\n[Install]\nWantedBy=multi-user.target\n")

	for _, f := range []struct{ path, content string }{{SysctlFile, sysctl.String()}, {UnitFile, unit.String()}} {
		full := filepath.Join(o.Root, f.path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return fmt.Errorf("writing %s: %w", f.path, err)
		}
		if err := writeAtomic(full, []byte(f.content)); err != nil {
			return err
		}
		if !slices.Contains(rec.Files, f.path) {
			rec.Files = append(rec.Files, f.path)
		}
		fmt.Fprintf(o.Out, "wrote %s\n", f.path)
	}
	link := filepath.Join(o.Root, WantsLink)
	if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			return fmt.Errorf("enabling %s: %w", UnitFile, err)
		}
		if err := os.Symlink(UnitFile, link); err != nil {
			return fmt.Errorf("enabling %s: %w", UnitFile, err)
		}
		rec.Files = append(rec.Files, WantsLink)
		fmt.Fprintf(o.Out, "enabled dlb-backend.service (%s)\n", WantsLink)
	}
	return nil
}

func sysctlDevs(iface string) []string {
	devs := []string{"all", "lo"}
	if iface != "" {
		devs = append(devs, iface)
	}
	return devs
}

func hasV4(vips []netip.Addr) bool {
	return slices.ContainsFunc(vips, func(a netip.Addr) bool { return a.Unmap().Is4() })
}

// hostPrefix is the /32 or /128 of a.
func hostPrefix(a netip.Addr) string {
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()).String()
}

func dotted(key string) string { return strings.ReplaceAll(key, "/", ".") }

func readSysctl(procSys, key string) (string, error) {
	b, err := os.ReadFile(filepath.Join(procSys, key))
	if err != nil {
		return "", fmt.Errorf("reading sysctl %s: %w", dotted(key), err)
	}
	return strings.TrimSpace(string(b)), nil
}

func writeSysctl(procSys, key, value string) error {
	if err := os.WriteFile(filepath.Join(procSys, key), []byte(value), 0o644); err != nil {
		return fmt.Errorf("setting sysctl %s=%s: %w", dotted(key), value, err)
	}
	return nil
}

// loAddresses returns the addresses on lo in prefix form, from
// "ip -j addr show dev lo".
func loAddresses(ip string) (map[string]bool, error) {
	out, err := exec.Command(ip, "-j", "addr", "show", "dev", "lo").Output()
	if err != nil {
		return nil, fmt.Errorf("listing lo's addresses with %s: %w", ip, cmdErr(err))
	}
	var links []struct {
		AddrInfo []struct {
			Local     string `json:"local"`
			PrefixLen int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		return nil, fmt.Errorf("reading %s's address list: %w", ip, err)
	}
	have := map[string]bool{}
	for _, l := range links {
		for _, a := range l.AddrInfo {
			if addr, err := netip.ParseAddr(a.Local); err == nil {
				if p, err := addr.Prefix(a.PrefixLen); err == nil && p.Bits() == addr.BitLen() {
					have[netip.PrefixFrom(addr, a.PrefixLen).String()] = true
				}
			}
		}
	}
	return have, nil
}

func run(name string, args ...string) error {
	if err := exec.Command(name, args...).Run(); err != nil {
		return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), cmdErr(err))
	}
	return nil
}

func cmdErr(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
	}
	return err
}

func loadRecord(root string) (Record, error) {
	var rec Record
	path := filepath.Join(root, RecordFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return rec, nil
	}
	if err != nil {
		return rec, fmt.Errorf("reading the record %s: %w", path, err)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("reading the record %s: %w", path, err)
	}
	return rec, nil
}

func saveRecord(root string, rec Record) error {
	path := filepath.Join(root, RecordFile)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("writing the record: %w", err)
	}
	b, _ := json.MarshalIndent(rec, "", "  ")
	return writeAtomic(path, append(b, '\n'))
}

// writeAtomic replaces path with data (mode 0644) atomically: a reader
// sees the old file or the new one, never part of it.
func writeAtomic(path string, data []byte) error {
	if err := renameio.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
