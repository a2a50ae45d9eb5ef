package main

import (
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlbproject/dlb/advisors"
	"github.com/dlbproject/dlb/pkg/api"
)

// completion runs "dlbctl __complete ARGS", as the shell scripts of
// "dlbctl completion" do, and returns the completions offered (without
// their descriptions), the directive and what dlbd was asked.
func completion(t *testing.T, f *fakeEngine, sock string, args ...string) ([]string, string, []string) {
	t.Helper()
	f.mu.Lock()
	f.targets = nil
	f.mu.Unlock()
	r := dlbctl(sock, append([]string{"__complete"}, args...)...)
	if r.code != 0 {
		t.Fatalf("__complete %q: exit %d: %s", args, r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var got []string
	for _, l := range lines[:len(lines)-1] {
		got = append(got, strings.SplitN(l, "\t", 2)[0])
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return got, lines[len(lines)-1], slices.Clone(f.targets)
}

// TestTargetCompletion: a target is completed from dlbd's clusters, ports and
// servers, component by component, in the '@' and the ':' grammar, with
// '+' lists; what follows the target from the command's keywords; the
// "add" commands offer only the components that exist already.
func TestTargetCompletion(t *testing.T) {
	f := &fakeEngine{
		clusters: []api.ClusterReport{{Address: "198.18.0.100", Ports: 2}, {Address: "198.18.0.101"}, {Address: "2001:2::100", Ports: 1}},
		ports:    []api.PortReport{{Cluster: "198.18.0.100", Port: 80}, {Cluster: "198.18.0.100", Port: 443}},
		servers: []api.ServerReport{{Cluster: "198.18.0.100", Port: 80, Address: "198.18.0.21", State: "up"},
			{Cluster: "198.18.0.100", Port: 80, Address: "198.18.0.22", State: "down"}},
		advisors: []api.AdvisorReport{{Name: "http", Cluster: "198.18.0.100", Port: 80}, {Name: "connect", Port: 443}},
	}
	sock := serve(t, f)
	const (
		more = ":6" // no space: the target goes on
		done = ":4" // no file names
	)
	for _, c := range []struct {
		args      []string
		want      []string
		directive string
		asked     []string // targets of the reports dlbd was asked for
	}{
		{[]string{"server", "remove", ""}, []string{"198.18.0.100@", "198.18.0.101@", "2001:2::100@"}, more, []string{""}},
		{[]string{"server", "remove", "198.18.0.10"}, []string{"198.18.0.100@", "198.18.0.101@"}, more, []string{""}},
		{[]string{"server", "remove", "198.18.0.100@"}, []string{"198.18.0.100@80@", "198.18.0.100@443@"}, more, []string{"198.18.0.100@"}},
		{[]string{"server", "remove", "198.18.0.100@80@"}, []string{"198.18.0.100@80@198.18.0.21", "198.18.0.100@80@198.18.0.22"}, done, []string{"198.18.0.100@80@"}},
		{[]string{"server", "down", "198.18.0.100@80@198.18.0.21+"}, []string{"198.18.0.100@80@198.18.0.21+198.18.0.22"}, done, []string{"198.18.0.100@80@"}},
		{[]string{"server", "report", "@80@198.18.0.2"}, []string{"@80@198.18.0.21", "@80@198.18.0.22"}, done, []string{"@80@"}},
		// dscontrol's ':' grammar, IPv6 addresses in brackets.
		{[]string{"server", "remove", "198.18.0.100:80:"}, []string{"198.18.0.100:80:198.18.0.21", "198.18.0.100:80:198.18.0.22"}, done, []string{"198.18.0.100@80@"}},
		{[]string{"port", "remove", "[2001:2::100]:"}, []string{"[2001:2::100]:80", "[2001:2::100]:443"}, done, []string{"2001:2::100@"}},
		{[]string{"port", "remove", "[2001"}, []string{"[2001:2::100]:"}, more, []string{""}},
		// An IPv6 address being typed is not a ':' target.
		{[]string{"cluster", "remove", "2001:2:"}, []string{"2001:2::100"}, done, []string{""}},
		{[]string{"cluster", "report", ""}, []string{"198.18.0.100", "198.18.0.101", "2001:2::100"}, done, []string{""}},
		// "add": the new component is not offered.
		{[]string{"cluster", "add", ""}, nil, done, nil},
		{[]string{"port", "add", "198.18.0.100@"}, nil, done, nil},
		{[]string{"server", "add", "198.18.0.100@"}, []string{"198.18.0.100@80@", "198.18.0.100@443@"}, more, []string{"198.18.0.100@"}},
		// One target only; keywords after it where the command takes them.
		{[]string{"server", "remove", "198.18.0.100@80@198.18.0.21", ""}, nil, done, nil},
		{[]string{"server", "set", "198.18.0.100@80@198.18.0.21", "fixedweight", "yes", "w"}, []string{"weight"}, done, nil},
		{[]string{"server", "set", "198.18.0.100@80@198.18.0.21", "fixed", ""}, []string{"yes", "no"}, done, nil},
		{[]string{"port", "set", "198.18.0.100@80", "sel"}, []string{"selectionalgorithm"}, done, nil},
		{[]string{"port", "set", "198.18.0.100@80", "selectionalgorithm", "conn"}, []string{"connection", "conn+affin"}, done, nil},
		{[]string{"cluster", "set", "198.18.0.100", "proportions", "50", "5"}, nil, done, nil},
		{[]string{"cluster", "set", "198.18.0.100", "proportions", "50", "50", "0", "0", "pr"}, []string{"primaryhost"}, done, nil},
		// Advisors: start offers them all, stop those dlbd runs.
		{[]string{"advisor", "start", "h"}, []string{"http", "https"}, done, nil},
		{[]string{"advisor", "start", "http", "198.18.0.100@"}, []string{"198.18.0.100@80", "198.18.0.100@443"}, done, []string{"198.18.0.100@"}},
		{[]string{"advisor", "stop", ""}, []string{"http", "connect"}, done, nil},
		{[]string{"advisor", "stop", "http", ""}, []string{"198.18.0.100@80"}, done, nil},
		{[]string{"advisor", "set", "connect", ""}, []string{"443"}, done, nil},
	} {
		got, directive, asked := completion(t, f, sock, c.args...)
		// Flags cobra offers beside (the required ones of "set") are its own.
		got = slices.DeleteFunc(got, func(s string) bool { return strings.HasPrefix(s, "--") })
		if !slices.Equal(got, c.want) || directive != c.directive || !slices.Equal(asked, c.asked) {
			t.Errorf("completion of %q: %q %s asking %q, want %q %s asking %q", c.args, got, directive, asked, c.want, c.directive, c.asked)
		}
	}
}

// TestTargetCompletionWithoutDlbd: when dlbd does not answer, or answers late,
// nothing is offered, within completionTimeout (a shell waits for it) or
// --timeout, and no error reaches the command line.
func TestTargetCompletionWithoutDlbd(t *testing.T) {
	dir := shortDir(t)
	r := dlbctl(dir+"/absent.sock", "__complete", "server", "remove", "")
	if r.code != 0 || strings.TrimSpace(r.stdout) != ":4" {
		t.Errorf("completion without dlbd: exit %d, %q, want only the directive :4", r.code, r.stdout)
	}
	// A socket that accepts and never answers.
	l, err := net.Listen("unix", dir+"/hung.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	start := time.Now()
	r = dlbctl(dir+"/hung.sock", "--timeout", "300ms", "__complete", "server", "remove", "")
	if took := time.Since(start); r.code != 0 || strings.TrimSpace(r.stdout) != ":4" || took > completionTimeout {
		t.Errorf("completion with a dlbd that does not answer: exit %d, %q after %v, want only :4 after about 300ms", r.code, r.stdout, took)
	}
}

// TestAdvisorNames: "advisor start" completes every advisor dlbd knows.
func TestAdvisorNames(t *testing.T) {
	want := append(advisors.Names(), "exec")
	slices.Sort(want)
	if !slices.Equal(advisorNames, want) {
		t.Errorf("advisorNames = %q, want the advisors' registry and exec: %q", advisorNames, want)
	}
}

// TestInterfaceCompletion: --interface completes with this host's
// Ethernet interfaces, never the loopback; with --host (dlbd on another
// host) with nothing.
func TestInterfaceCompletion(t *testing.T) {
	want := map[string]bool{}
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, ifc := range ifs {
		want[ifc.Name] = len(ifc.HardwareAddr) == 6 && ifc.HardwareAddr.String() != "00:00:00:00:00:00"
	}
	for _, args := range [][]string{{"executor", "start", "--interface", ""}, {"backend", "setup", "198.18.0.100", "--interface", ""}} {
		got, directive, _ := completion(t, &fakeEngine{}, "/nonexistent", args...)
		for _, name := range got {
			if !want[name] {
				t.Errorf("%q offers %q, not an Ethernet interface of this host", args, name)
			}
		}
		if slices.Contains(got, "lo") || directive != ":4" {
			t.Errorf("%q offers %q %s", args, got, directive)
		}
		n := 0
		for _, eth := range want {
			if eth {
				n++
			}
		}
		if len(got) != n {
			t.Errorf("%q offers %d interfaces, the host has %d Ethernet interfaces", args, len(got), n)
		}
	}
	r := dlbctl("/nonexistent", "--host", "198.18.0.2:7443", "__complete", "executor", "start", "--interface", "")
	if strings.TrimSpace(r.stdout) != ":4" {
		t.Errorf("with --host, --interface completes with %q, want nothing", r.stdout)
	}
}
