package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// icmpResult is labicmp's -json summary.
type icmpResult struct {
	Flows []struct {
		Local   string `json:"local"`
		Backend string `json:"backend"`
	} `json:"flows"`
	PerBackend map[string]int `json:"per_backend"`
	Sent       int            `json:"sent"`
	Errors     []string       `json:"errors"`
}

// icmpCounter reads one ICMP counter of a lab namespace: IcmpInDestUnreachs
// from /proc/net/snmp, or an IPv6 one (Icmp6InPktTooBigs) from
// /proc/net/snmp6.
func (l *lab) icmpCounter(role, name string) uint64 {
	l.t.Helper()
	out, err := l.inNS(role, "cat", "/proc/net/snmp", "/proc/net/snmp6")
	if err != nil {
		l.t.Fatalf("reading %s's counters: %v\n%s", role, err, out)
	}
	var header []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == name {
			v, _ := strconv.ParseUint(f[1], 10, 64)
			return v
		}
		if len(f) < 2 || f[0] != "Icmp:" {
			continue
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			header = f
			continue
		}
		for i := 1; i < len(f) && i < len(header); i++ {
			if "Icmp"+header[i] == name {
				v, _ := strconv.ParseUint(f[i], 10, 64)
				return v
			}
		}
	}
	l.t.Fatalf("%s has no counter %s", role, name)
	return 0
}

// icmpPhase opens 200 connections to addr:80 from the client, sends an
// ICMP error about each (as a router would about the server's reply) and
// checks that every backend received exactly the errors about its own
// flows.
func (l *lab) icmpPhase(name, addr, counter string, backends int) {
	l.t.Helper()
	t := l.t
	before := map[string]uint64{}
	for i := 1; i <= backends; i++ {
		b := fmt.Sprintf("b%d", i)
		before[b] = l.icmpCounter(b, counter)
	}
	evBefore := l.executor().Events["icmp_to_backend"]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", "--net=/run/netns/"+l.env["LAB_C1_NS"], filepath.Join(binDir, "labicmp"),
		"-target", hostPort(addr, "80"), "-conns", "200", "-hold", "2s", "-json")
	out, err := cmd.Output()
	var r icmpResult
	if jerr := json.Unmarshal(out, &r); jerr != nil || err != nil {
		t.Fatalf("%s: labicmp: %v (%v): %s", name, err, jerr, out)
	}
	if r.Sent != 200 || len(r.Flows) != 200 || len(r.Errors) != 0 {
		t.Fatalf("%s: %d flows, %d errors sent, errors %v", name, len(r.Flows), r.Sent, r.Errors)
	}
	time.Sleep(200 * time.Millisecond)
	total := uint64(0)
	for i := 1; i <= backends; i++ {
		b := fmt.Sprintf("b%d", i)
		got := l.icmpCounter(b, counter) - before[b]
		total += got
		t.Logf("%s: %s owns %d flows and received %d ICMP errors", name, b, r.PerBackend[b], got)
		if got != uint64(r.PerBackend[b]) {
			t.Errorf("%s: %s owns %d flows but received %d ICMP errors", name, b, r.PerBackend[b], got)
		}
		if r.PerBackend[b] == 0 {
			t.Errorf("%s: no flow reached %s", name, b)
		}
	}
	ev := l.executor().Events["icmp_to_backend"] - evBefore
	t.Logf("%s: 200 errors sent, %d reached their flow's owner (executor: %d delivered to a backend)", name, total, ev)
	if total != 200 || ev != 200 {
		t.Errorf("%s: %d of 200 errors reached the owners, executor delivered %d", name, total, ev)
	}
}

// TestPrivilegedE2EICMPErrors: 200 flows over 4 backends, and for each an
// ICMP "fragmentation needed" (IPv4) and an ICMPv6 "packet too big"
// (IPv6) sent to the cluster address about the server's reply: every one
// reaches the backend that owns the flow, none another.
func TestPrivilegedE2EICMPErrors(t *testing.T) {
	parallel(t)
	l := newLabArgs(t, "-n", "4", "-c", "1", "-6")
	l.startDlbd()
	l.configure("generic", 10, 10, 10, 10)
	vip6 := l.env["LAB_VIP6"]
	l.mustCtl("executor", "set", "nfa", l.env["LAB_NFA6"])
	l.mustCtl("cluster", "add", vip6, "--configure")
	l.mustCtl("port", "add", vip6+"@80")
	for i := 1; i <= 4; i++ {
		l.mustCtl("server", "add", fmt.Sprintf("%s@80@%s", vip6, l.env[fmt.Sprintf("LAB_B%d_ADDR6", i)]))
	}
	l.waitServersUp()
	l.icmpPhase("IPv4 fragmentation needed", l.vip(), "IcmpInDestUnreachs", 4)
	l.icmpPhase("ICMPv6 packet too big", vip6, "Icmp6InPktTooBigs", 4)
}
