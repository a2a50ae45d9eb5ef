package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/client"
	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/lb"
)

// opJSON shows an operation with the parameters it carries, for failure
// messages.
func opJSON(ops ...api.Op) string {
	b, _ := json.Marshal(ops)
	return string(b)
}

func TestCommandOps(t *testing.T) {
	const (
		ex = api.ObjectExecutor
		cl = api.ObjectCluster
		po = api.ObjectPort
		sv = api.ObjectServer
	)
	tests := []struct {
		args []string
		want api.Op
	}{
		{[]string{"executor", "start", "--interface", "eth0", "--xdp-mode", "native"},
			api.Op{Object: ex, Action: api.ActionStart, Interface: ptr("eth0"), XDPMode: ptr("native")}},
		{[]string{"executor", "start"}, api.Op{Object: ex, Action: api.ActionStart}},
		{[]string{"executor", "start", "--interface=eth1"}, api.Op{Object: ex, Action: api.ActionStart, Interface: ptr("eth1")}},
		{[]string{"executor", "stop"}, api.Op{Object: ex, Action: api.ActionStop}},
		{[]string{"executor", "set", "nfa", "192.0.2.10"}, api.Op{Object: ex, Action: api.ActionSet, NFA: ptr("192.0.2.10")}},
		{[]string{"executor", "set", "fintimeout", "30"}, api.Op{Object: ex, Action: api.ActionSet, FinTimeout: ptr[int64](30)}},
		// Keywords take unique prefixes, and several pairs make one op.
		{[]string{"executor", "set", "fin", "0", "n", "none"},
			api.Op{Object: ex, Action: api.ActionSet, FinTimeout: ptr[int64](0), NFA: ptr("none")}},
		// The address's family picks the IPv4 or IPv6 value: dlbd's job.
		{[]string{"executor", "set", "nfa", "2001:2::2"}, api.Op{Object: ex, Action: api.ActionSet, NFA: ptr("2001:2::2")}},
		{[]string{"executor", "set", "clientgateway", "192.0.2.1"},
			api.Op{Object: ex, Action: api.ActionSet, ClientGateway: ptr("192.0.2.1")}},
		{[]string{"executor", "set", "c", "none", "nfa", "2001:2::2", "f", "30"},
			api.Op{Object: ex, Action: api.ActionSet, ClientGateway: ptr("none"), NFA: ptr("2001:2::2"), FinTimeout: ptr[int64](30)}},
		// As flags too, as every other set command takes them.
		{[]string{"executor", "set", "--nfa", "192.0.2.10", "--clientgateway=192.0.2.1", "fintimeout", "30"},
			api.Op{Object: ex, Action: api.ActionSet, NFA: ptr("192.0.2.10"), ClientGateway: ptr("192.0.2.1"), FinTimeout: ptr[int64](30)}},
		{[]string{"executor", "set", "--fintimeout", "0"}, api.Op{Object: ex, Action: api.ActionSet, FinTimeout: ptr[int64](0)}},
		{[]string{"cluster", "add", "10.0.0.1+10.0.0.2"}, api.Op{Object: cl, Action: api.ActionAdd, Target: "10.0.0.1+10.0.0.2"}},
		{[]string{"cluster", "add", "10.0.0.1", "--configure"},
			api.Op{Object: cl, Action: api.ActionAdd, Target: "10.0.0.1", Configure: ptr(true)}},
		{[]string{"cluster", "set", "10.0.0.1", "--configure=false"},
			api.Op{Object: cl, Action: api.ActionSet, Target: "10.0.0.1", Configure: ptr(false)}},
		{[]string{"cluster", "remove", "10.0.0.1"}, api.Op{Object: cl, Action: api.ActionRemove, Target: "10.0.0.1"}},
		{[]string{"cluster", "set", "10.0.0.1", "--announce", "yes", "--community", "65000:100", "--community", "no-export", "--med", "10"},
			api.Op{Object: cl, Action: api.ActionSet, Target: "10.0.0.1", Announce: ptr(true),
				Communities: []string{"65000:100", "no-export"}, MED: ptr[int64](10)}},
		{[]string{"cluster", "add", "10.0.0.1", "--announce", "no"},
			api.Op{Object: cl, Action: api.ActionAdd, Target: "10.0.0.1", Announce: ptr(false)}},
		{[]string{"bgp", "set", "--asn", "65001", "--routerid", "198.18.0.2", "--listen-port", "0"},
			api.Op{Object: api.ObjectBGP, Action: api.ActionSet, ASN: ptr[int64](65001), RouterID: ptr("198.18.0.2"), ListenPort: ptr[int64](0)}},
		{[]string{"bgp", "remove"}, api.Op{Object: api.ObjectBGP, Action: api.ActionRemove}},
		{[]string{"bgp", "neighbor", "add", "198.18.0.1", "--remote-as", "65000", "--password-file", "/etc/dlb/pw",
			"--holdtime", "9", "--multihop", "2", "--port", "1179"},
			api.Op{Object: api.ObjectNeighbor, Action: api.ActionAdd, Target: "198.18.0.1", RemoteAS: ptr[int64](65000),
				PasswordFile: ptr("/etc/dlb/pw"), HoldTime: ptr[int64](9), Multihop: ptr[int64](2), NeighborPort: ptr[int64](1179)}},
		{[]string{"bgp", "neighbor", "set", "2001:2::1", "--holdtime", "30"},
			api.Op{Object: api.ObjectNeighbor, Action: api.ActionSet, Target: "2001:2::1", HoldTime: ptr[int64](30)}},
		{[]string{"bgp", "neighbor", "set", "198.18.0.1", "--bfd", "yes"},
			api.Op{Object: api.ObjectNeighbor, Action: api.ActionSet, Target: "198.18.0.1", BFD: ptr(true)}},
		{[]string{"bgp", "neighbor", "remove", "198.18.0.1"},
			api.Op{Object: api.ObjectNeighbor, Action: api.ActionRemove, Target: "198.18.0.1"}},
		{[]string{"port", "add", "10.0.0.1@80"}, api.Op{Object: po, Action: api.ActionAdd, Target: "10.0.0.1@80"}},
		// A flag set to its zero value is still sent: the user set it.
		{[]string{"port", "add", "10.0.0.1@53", "--protocol", "both", "--method", "mac", "--stickytime", "0",
			"--staletimeout", "30", "--weightbound", "50"},
			api.Op{Object: po, Action: api.ActionAdd, Target: "10.0.0.1@53", Protocol: ptr("both"), Method: ptr("mac"),
				StickyTime: ptr[int64](0), StaleTimeout: ptr[int64](30), WeightBound: ptr[int64](50)}},
		{[]string{"port", "set", "@80", "--weightbound", "10"},
			api.Op{Object: po, Action: api.ActionSet, Target: "@80", WeightBound: ptr[int64](10)}},
		{[]string{"port", "set", "10.0.0.1@80", "--protocol", "udp"},
			api.Op{Object: po, Action: api.ActionSet, Target: "10.0.0.1@80", Protocol: ptr("udp")}},
		{[]string{"port", "set", "10.0.0.1@80", "--tablesize", "65537"},
			api.Op{Object: po, Action: api.ActionSet, Target: "10.0.0.1@80", TableSize: ptr[int64](65537)}},
		{[]string{"port", "set", "10.0.0.1:80", "tablesize", "0"},
			api.Op{Object: po, Action: api.ActionSet, Target: "10.0.0.1@80", TableSize: ptr[int64](0)}},
		{[]string{"port", "add", "10.0.0.1@8080", "--method", "nat", "--stickytime", "300", "--stickymask", "24",
			"--crossport", "80", "--selectionalgorithm", "conn+affin", "--maxhalfopen", "1000"},
			api.Op{Object: po, Action: api.ActionAdd, Target: "10.0.0.1@8080", Method: ptr("nat"), StickyTime: ptr[int64](300),
				StickyMask: ptr[int64](24), CrossPort: ptr[int64](80), SelectionAlgorithm: ptr("conn+affin"), MaxHalfOpen: ptr[int64](1000)}},
		// 0 clears crossport, stickymask and maxhalfopen; it is sent.
		{[]string{"port", "set", "10.0.0.1@443", "--crossport", "0", "--stickymask=0", "--maxhalfopen", "0"},
			api.Op{Object: po, Action: api.ActionSet, Target: "10.0.0.1@443", CrossPort: ptr[int64](0), StickyMask: ptr[int64](0),
				MaxHalfOpen: ptr[int64](0)}},
		{[]string{"port", "set", "@80", "--selectionalgorithm", "connection"},
			api.Op{Object: po, Action: api.ActionSet, Target: "@80", SelectionAlgorithm: ptr("connection")}},
		{[]string{"port", "set", "2001:2::100@80", "--crossport", "-1", "--stickymask", "200"},
			api.Op{Object: po, Action: api.ActionSet, Target: "2001:2::100@80", CrossPort: ptr[int64](-1), StickyMask: ptr[int64](200)}},
		{[]string{"port", "remove", "10.0.0.1@80+443"}, api.Op{Object: po, Action: api.ActionRemove, Target: "10.0.0.1@80+443"}},
		{[]string{"server", "add", "@80@198.18.0.21"}, api.Op{Object: sv, Action: api.ActionAdd, Target: "@80@198.18.0.21"}},
		{[]string{"server", "add", "10.0.0.1@80@10.1.1.5", "--weight", "5"},
			api.Op{Object: sv, Action: api.ActionAdd, Target: "10.0.0.1@80@10.1.1.5", Weight: ptr[int64](5)}},
		// Ranges are dlbd's to check: the CLI sends what it was given.
		{[]string{"server", "set", "10.0.0.1@80@10.1.1.5", "--weight", "500"},
			api.Op{Object: sv, Action: api.ActionSet, Target: "10.0.0.1@80@10.1.1.5", Weight: ptr[int64](500)}},
		{[]string{"server", "set", "10.0.0.1@80@10.1.1.5", "--weight", "-1"},
			api.Op{Object: sv, Action: api.ActionSet, Target: "10.0.0.1@80@10.1.1.5", Weight: ptr[int64](-1)}},
		{[]string{"server", "add", "2001:2::100@80@2001:2:1::11", "--mapport", "8080", "--returnaddress", "2001:2::3",
			"--router", "2001:2::fe"},
			api.Op{Object: sv, Action: api.ActionAdd, Target: "2001:2::100@80@2001:2:1::11", MapPort: ptr[int64](8080),
				ReturnAddress: ptr("2001:2::3"), Router: ptr("2001:2::fe")}},
		{[]string{"server", "set", "10.0.0.1@80@198.18.1.11", "--mapport", "0", "--returnaddress", "none", "--router", "none"},
			api.Op{Object: sv, Action: api.ActionSet, Target: "10.0.0.1@80@198.18.1.11", MapPort: ptr[int64](0),
				ReturnAddress: ptr("none"), Router: ptr("none")}},
		{[]string{"server", "set", "10.0.0.1@80@198.18.1.11", "--router", "198.18.0.254"},
			api.Op{Object: sv, Action: api.ActionSet, Target: "10.0.0.1@80@198.18.1.11", Router: ptr("198.18.0.254")}},
		{[]string{"server", "set", "10.0.0.1@80@198.18.1.11", "--mapport", "70000"},
			api.Op{Object: sv, Action: api.ActionSet, Target: "10.0.0.1@80@198.18.1.11", MapPort: ptr[int64](70000)}},
		{[]string{"server", "down", "@@10.1.1.5"}, api.Op{Object: sv, Action: api.ActionDown, Target: "@@10.1.1.5"}},
		{[]string{"server", "up", "@@10.1.1.5"}, api.Op{Object: sv, Action: api.ActionUp, Target: "@@10.1.1.5"}},
		{[]string{"server", "remove", "10.0.0.1@80@10.1.1.5"}, api.Op{Object: sv, Action: api.ActionRemove, Target: "10.0.0.1@80@10.1.1.5"}},
		// dscontrol's unique prefixes.
		{[]string{"se", "a", "10.0.0.1@80@10.1.1.6", "--weight", "3"},
			api.Op{Object: sv, Action: api.ActionAdd, Target: "10.0.0.1@80@10.1.1.6", Weight: ptr[int64](3)}},
		{[]string{"ex", "sto"}, api.Op{Object: ex, Action: api.ActionStop}},
		// Global flags go anywhere.
		{[]string{"-o", "json", "cluster", "remove", "10.0.0.9"}, api.Op{Object: cl, Action: api.ActionRemove, Target: "10.0.0.9"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			eng := &fakeEngine{}
			r := dlbctl(serve(t, eng), tt.args...)
			if r.code != exitOK || r.stderr != "" {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			got := eng.sent()
			if len(got) != 1 || len(got[0]) != 1 || !reflect.DeepEqual(got[0][0], tt.want) {
				t.Errorf("sent %v\nwant [%s]", got, opJSON(tt.want))
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"bogus"}, `unknown command "bogus" for "dlbctl"`},
		{[]string{"server", "bogus", "x"}, `unknown command "bogus" for "dlbctl server"`},
		{[]string{"server", "re", "x"}, `unknown command "re"`}, // ambiguous: remove, report
		{[]string{"--bogus"}, "unknown flag: --bogus"},
		{[]string{"cluster", "add", "10.0.0.1", "--weight", "5"}, "unknown flag: --weight"},
		{[]string{"server", "add"}, "server add needs a target (VIP@PORT@ADDR or VIP:PORT:ADDR)"},
		// After the target come keyword-value pairs (see TestIBMForms).
		{[]string{"server", "add", "a", "b"}, `unknown keyword "b" for server add (keywords: advisorrequest, advisorresponse, ` +
			`fixedweight, mapport, returnaddress, router, weight)`},
		// A second target given as a keyword: the message says how to give several.
		{[]string{"cluster", "add", "10.0.0.1", "10.0.0.2"}, "cluster add takes one target: join several with '+' (10.0.0.1+10.0.0.2)"},
		{[]string{"server", "add", "10.0.0.1@80@10.1.1.5", "10.1.1.6"}, "join several with '+' (10.0.0.1@80@10.1.1.5+10.1.1.6)"},
		{[]string{"server", "remove", "10.0.0.1@80@10.1.1.5", "weight", "5"}, "server remove takes one target (VIP@PORT@ADDR or VIP:PORT:ADDR), got 3 arguments"},
		{[]string{"server", "remove"}, "needs a target"},
		{[]string{"cluster", "report", "a", "b"}, "takes one target"},
		{[]string{"server", "add", "10.0.0.1@80@10.1.1.5", "--weight", "abc"}, `"--weight"`},
		{[]string{"port", "add", "10.0.0.1@80", "--staletimeout", "1.5"}, `"--staletimeout"`},
		{[]string{"port", "add", "10.0.0.1@80", "--weightbound="}, `"--weightbound"`},
		{[]string{"cluster", "add", "10.0.0.1", "--configure=maybe"}, `"--configure"`},
		{[]string{"cluster", "set", "10.0.0.1", "--configure", "no"}, `unknown keyword "no" for cluster set (keywords: announce, ` +
			`community, configure, med, primaryhost, proportions); a switch takes its value after '=' (--configure=no), or give it as a keyword (configure no)`},
		{[]string{"executor", "set"}, "executor set needs KEYWORD VALUE"},
		{[]string{"executor", "set", "bogus", "1"}, `unknown executor keyword "bogus"`},
		{[]string{"executor", "set", "nfa"}, "executor keyword nfa needs a value"},
		{[]string{"executor", "set", "fintimeout", "abc"}, `invalid fintimeout "abc"`},
		{[]string{"executor", "set", "nfa", "a", "nfa", "b"}, "given twice"},
		{[]string{"executor", "set", "nfa", "192.0.2.10", "nfa", "2001:2::2"}, "executor keyword nfa given twice"},
		{[]string{"executor", "set", "--nfa", "192.0.2.10", "nfa", "192.0.2.11"}, "executor keyword nfa given twice"},
		{[]string{"executor", "set", "--fintimeout", "abc"}, `invalid fintimeout "abc"`},
		{[]string{"executor", "set", "clientgateway"}, "executor keyword clientgateway needs a value"},
		{[]string{"executor", "set", "gateway", "192.0.2.1"}, `unknown executor keyword "gateway" (want nfa, clientgateway or fintimeout)`},
		{[]string{"port", "add", "10.0.0.1@80", "--stickymask", "abc"}, `"--stickymask"`},
		{[]string{"port", "set", "10.0.0.1@80", "--crossport", "http"}, `"--crossport"`},
		{[]string{"port", "set", "10.0.0.1@80", "--crossport"}, "flag needs an argument: --crossport"},
		{[]string{"port", "add", "10.0.0.1@80", "--maxhalfopen", "1e3"}, `"--maxhalfopen"`},
		{[]string{"port", "add", "10.0.0.1@80", "--selectionalgorithm"}, "flag needs an argument: --selectionalgorithm"},
		{[]string{"server", "add", "10.0.0.1@80@10.1.1.5", "--mapport", "8080/tcp"}, `"--mapport"`},
		{[]string{"server", "set", "10.0.0.1@80@10.1.1.5", "--mapport="}, `"--mapport"`},
		{[]string{"server", "set", "10.0.0.1@80@10.1.1.5", "--router"}, "flag needs an argument: --router"},
		{[]string{"cluster", "add", "10.0.0.1", "--router", "10.0.0.254"}, "unknown flag: --router"},
		{[]string{"executor", "start", "eth0"}, `executor start takes no arguments (got "eth0")`},
		{[]string{"executor", "report", "x"}, "takes no arguments"},
		{[]string{"cluster", "set", "10.0.0.1"}, `at least one of the flags in the group [configure proportions primaryhost announce community med] is required`},
		{[]string{"cluster", "set", "10.0.0.1", "--announce", "maybe"}, `--announce: "maybe" is not yes or no`},
		{[]string{"bgp", "set"}, `at least one of the flags in the group [asn routerid listen-port] is required`},
		{[]string{"bgp", "set", "--asn", "AS1"}, `"--asn"`},
		{[]string{"bgp", "neighbor", "add", "198.18.0.1"}, `required flag(s) "remote-as" not set`},
		{[]string{"bgp", "neighbor", "add", "router1", "--remote-as", "1"}, `"router1" is not an IP address`},
		{[]string{"bgp", "neighbor", "remove"}, `needs one neighbour address`},
		{[]string{"bgp", "neighbor", "set", "198.18.0.1", "--bfd", "fast"}, `--bfd: "fast" is not yes or no`},
		{[]string{"server", "set", "10.0.0.1@80@10.1.1.5"},
			`at least one of the flags in the group [weight fixedweight advisorrequest advisorresponse mapport returnaddress router] is required`},
		{[]string{"port", "set", "10.0.0.1@80"}, `at least one of the flags in the group [protocol method stickytime stickymask ` +
			`crossport selectionalgorithm maxhalfopen staletimeout weightbound alldown tablesize] is required`},
		{[]string{"server", "report", "-o", "xml"}, `invalid --output "xml"`},
		{[]string{"-o", "csv", "executor", "report"}, `invalid --output "csv"`},
		{[]string{"file", "save"}, "file save needs one FILE"},
		{[]string{"file", "load", "a", "b"}, "file load needs one FILE"},
		{[]string{"version", "x"}, "takes no arguments"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			eng := &fakeEngine{}
			r := dlbctl(serve(t, eng), tt.args...)
			if r.code != exitUsage {
				t.Errorf("exit %d, want %d; stderr %q", r.code, exitUsage, r.stderr)
			}
			if !strings.HasPrefix(r.stderr, "dlbctl: ") || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("stderr %q, want it to contain %q", r.stderr, tt.want)
			}
			if !strings.Contains(r.stderr, "--help' for usage") {
				t.Errorf("stderr %q does not point to --help", r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
			if got := eng.sent(); len(got) != 0 {
				t.Errorf("sent %v, want nothing", got)
			}
		})
	}
}

func TestRefused(t *testing.T) {
	eng := &fakeEngine{refuse: &config.OpError{Index: 0,
		Err: lb.Errorf("weight", "10.0.0.1@80@10.1.1.5", "500 is outside 0..20")}}
	r := dlbctl(serve(t, eng), "server", "set", "10.0.0.1@80@10.1.1.5", "--weight", "500")
	if r.code != exitFailed {
		t.Errorf("exit %d, want %d", r.code, exitFailed)
	}
	if want := "dlbctl: weight: 500 is outside 0..20 (10.0.0.1@80@10.1.1.5)\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
	if len(eng.sent()) != 1 {
		t.Errorf("sent %v, want one batch", eng.sent())
	}
}

func TestReportRefused(t *testing.T) {
	eng := &fakeEngine{reportErr: lb.Errorf("cluster", "10.9.9.9", "is not a configured cluster")}
	r := dlbctl(serve(t, eng), "cluster", "report", "10.9.9.9")
	if r.code != exitFailed || r.stderr != "dlbctl: cluster: is not a configured cluster (10.9.9.9)\n" {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("stdout %q, want nothing", r.stdout)
	}
}

func TestUnreachable(t *testing.T) {
	sock := filepath.Join(shortDir(t), "nobody.sock")
	for _, args := range [][]string{
		{"server", "report"},
		{"server", "add", "10.0.0.1@80@10.1.1.5"},
		{"executor", "report"},
		{"file", "save", filepath.Join(shortDir(t), "cfg")},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := dlbctl(sock, args...)
			if r.code != exitUnreachable {
				t.Errorf("exit %d, want %d; stderr %q", r.code, exitUnreachable, r.stderr)
			}
			for _, want := range []string{"dlbctl: cannot reach dlbd at " + sock, "there is no socket at " + sock, "is dlbd running", "--socket"} {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr %q, want it to contain %q", r.stderr, want)
				}
			}
		})
	}
}

// TestUnreachableSays: what is at the socket's path says what to do.
func TestUnreachableSays(t *testing.T) {
	dir := shortDir(t)
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	for _, c := range []struct{ path, want string }{
		{filepath.Join(dir, "absent.sock"), "there is no socket at " + dir + "/absent.sock: is dlbd running"},
		{file, file + " is a regular file, not dlbd's socket"},
		{dir, dir + " is a directory, not dlbd's socket"},
		{stale, "no dlbd listens on " + stale + " (left by a dlbd that stopped?)"},
	} {
		r := dlbctl(c.path, "status")
		if r.code != exitUnreachable || !strings.Contains(r.stderr, c.want) {
			t.Errorf("socket %s: exit %d, %q; want %d and %q", c.path, r.code, r.stderr, exitUnreachable, c.want)
		}
	}
	// Not root and not in group dlb (the tests run as root).
	denied := &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.EACCES)}
	if got := socketHint(stale, denied); !strings.Contains(got, "needs root or group dlb") {
		t.Errorf("permission denied says %q", got)
	}
}

func TestSocketChoice(t *testing.T) {
	envEng, flagEng := &fakeEngine{}, &fakeEngine{}
	envSock, flagSock := serve(t, envEng), serve(t, flagEng)

	r := runWith(map[string]string{"DLB_SOCKET": envSock}, "server", "up", "@@10.1.1.5")
	if r.code != exitOK || len(envEng.sent()) != 1 || len(flagEng.sent()) != 0 {
		t.Errorf("DLB_SOCKET: exit %d (%s), env got %d, flag got %d", r.code, r.stderr, len(envEng.sent()), len(flagEng.sent()))
	}
	r = runWith(map[string]string{"DLB_SOCKET": envSock}, "--socket", flagSock, "server", "up", "@@10.1.1.5")
	if r.code != exitOK || len(envEng.sent()) != 1 || len(flagEng.sent()) != 1 {
		t.Errorf("--socket over DLB_SOCKET: exit %d (%s), env got %d, flag got %d", r.code, r.stderr, len(envEng.sent()), len(flagEng.sent()))
	}

	// Neither: the default socket. The factory records it instead of
	// dialling /run/dlb.
	var asked []string
	var timeouts []time.Duration
	e := &env{
		stdout: &strings.Builder{}, stderr: &strings.Builder{},
		getenv: func(string) string { return "" },
		newClient: func(socket string, timeout time.Duration) dlbClient {
			asked, timeouts = append(asked, socket), append(timeouts, timeout)
			return unreachableClient{}
		},
	}
	if code := run(e, []string{"cluster", "report"}); code != exitUnreachable {
		t.Errorf("exit %d, want %d", code, exitUnreachable)
	}
	if len(asked) != 1 || asked[0] != client.DefaultSocket || timeouts[0] != client.DefaultTimeout {
		t.Errorf("client for %q waiting %v, want [%s] waiting %v", asked, timeouts, client.DefaultSocket, client.DefaultTimeout)
	}
}

// TestNoAnswer: a dlbd that takes the request and does not answer (stopped,
// stuck) or ends before it answers is told from one that cannot be reached:
// exit 4, saying a change may have been applied; --timeout bounds the wait.
func TestNoAnswer(t *testing.T) {
	for _, c := range []struct {
		name    string
		hold    bool // keep the connection open, reading nothing
		timeout string
		want    []string
	}{
		{name: "stopped dlbd", hold: true, timeout: "300ms",
			want: []string{"dlbd did not answer within 300ms at ", "is it stopped or stuck", "A change may have been applied or not", "--timeout"}},
		{name: "dlbd that ends", hold: false, timeout: "5s",
			want: []string{"dlbd did not answer at ", "A change may have been applied or not"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sock := filepath.Join(shortDir(t), "stuck.sock")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			var held []net.Conn
			var mu sync.Mutex
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					conn, err := ln.Accept()
					if err != nil {
						return
					}
					if !c.hold {
						// Read the request, then end without an answer.
						_, _ = conn.Read(make([]byte, 4096))
						conn.Close()
						continue
					}
					mu.Lock()
					held = append(held, conn)
					mu.Unlock()
				}
			}()
			t.Cleanup(func() {
				ln.Close()
				<-done
				mu.Lock()
				for _, conn := range held {
					conn.Close()
				}
				mu.Unlock()
			})
			for _, args := range [][]string{
				{"server", "report"},
				{"server", "add", "10.0.0.1@80@10.1.1.5"},
			} {
				start := time.Now()
				r := dlbctl(sock, append([]string{"--timeout", c.timeout}, args...)...)
				took := time.Since(start)
				if r.code != exitNoAnswer {
					t.Errorf("%v: exit %d, want %d; stderr %q", args, r.code, exitNoAnswer, r.stderr)
				}
				for _, want := range c.want {
					if !strings.Contains(r.stderr, want) {
						t.Errorf("%v: stderr %q, want it to contain %q", args, r.stderr, want)
					}
				}
				if strings.Contains(r.stderr, "cannot reach dlbd") {
					t.Errorf("%v: stderr %q says dlbd could not be reached", args, r.stderr)
				}
				if c.hold && took > 5*time.Second {
					t.Errorf("%v: took %v with --timeout %s", args, took, c.timeout)
				}
			}
		})
	}
	r := dlbctl(filepath.Join(shortDir(t), "none.sock"), "--timeout", "-1s", "server", "report")
	if r.code != exitUsage || !strings.Contains(r.stderr, "invalid --timeout -1s") {
		t.Errorf("--timeout -1s: exit %d, stderr %q; want a usage error", r.code, r.stderr)
	}
}

// unreachableClient fails every call as if dlbd were not running.
type unreachableClient struct{}

var errDown = errors.Join(client.ErrUnreachable, errors.New("test"))

func (unreachableClient) ConfigScript(context.Context) (string, error) { return "", errDown }
func (unreachableClient) HA(context.Context) (api.HAReport, error)     { return api.HAReport{}, errDown }
func (unreachableClient) Takeover(context.Context, string) (api.Result, error) {
	return api.Result{}, errDown
}
func (unreachableClient) ConfigFile(context.Context, string) ([]byte, error) { return nil, errDown }
func (unreachableClient) ApplyConfig(context.Context, []byte, bool) (api.ConfigResult, error) {
	return api.ConfigResult{}, errDown
}
func (unreachableClient) Apply(context.Context, ...api.Op) (api.Result, error) {
	return api.Result{}, errDown
}
func (unreachableClient) Executor(context.Context) (api.ExecutorReport, error) {
	return api.ExecutorReport{}, errDown
}
func (unreachableClient) Clusters(context.Context, string) ([]api.ClusterReport, error) {
	return nil, errDown
}
func (unreachableClient) Ports(context.Context, string) ([]api.PortReport, error) {
	return nil, errDown
}
func (unreachableClient) Servers(context.Context, string) ([]api.ServerReport, error) {
	return nil, errDown
}
func (unreachableClient) Manager(context.Context, string) (api.ManagerReport, error) {
	return api.ManagerReport{}, errDown
}
func (unreachableClient) Advisors(context.Context) ([]api.AdvisorReport, error) {
	return nil, errDown
}
func (unreachableClient) Metrics(context.Context) (api.MetricReport, error) {
	return api.MetricReport{}, errDown
}

func TestNoArgsPrintsHelp(t *testing.T) {
	r := dlbctl("/nonexistent")
	if r.code != exitOK {
		t.Errorf("exit %d, want 0", r.code)
	}
	for _, want := range []string{"Usage:", "Exit status:", "3  dlbd is unreachable", "DLB_SOCKET", "server"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("help lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestNounAlonePrintsHelp(t *testing.T) {
	r := dlbctl("/nonexistent", "server")
	if r.code != exitOK || !strings.Contains(r.stdout, "Available Commands:") || !strings.Contains(r.stdout, "report") {
		t.Errorf("exit %d, stdout\n%s", r.code, r.stdout)
	}
}

func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		r := dlbctl("/nonexistent", "completion", shell)
		if r.code != exitOK || !strings.Contains(r.stdout, "dlbctl") {
			t.Errorf("completion %s: exit %d, %d bytes, stderr %q", shell, r.code, len(r.stdout), r.stderr)
		}
	}
	// Flag values complete from the fixed sets.
	for flag, values := range map[string][]string{
		"--protocol":           {"tcp", "udp", "both"},
		"--method":             {"mac", "nat"},
		"--selectionalgorithm": {"connection", "affinity", "conn+affin"},
	} {
		r := dlbctl("/nonexistent", "__complete", "port", "set", "10.0.0.1@80", flag, "")
		for _, want := range values {
			if !strings.Contains(r.stdout, want+"\n") {
				t.Errorf("%s completions %q lack %s", flag, r.stdout, want)
			}
		}
	}
	r := dlbctl("/nonexistent", "__complete", "executor", "set", "")
	for _, want := range executorKeywords {
		if !strings.Contains(r.stdout, want+"\n") {
			t.Errorf("executor set completions %q lack %s", r.stdout, want)
		}
	}
}

func TestVersion(t *testing.T) {
	r := dlbctl("/nonexistent", "version")
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "dlbctl ") || !strings.Contains(r.stdout, "API v1") {
		t.Errorf("exit %d, stdout %q", r.code, r.stdout)
	}
}

// commandPaths lists the argument vectors that name every command.
func commandPaths(c *cobra.Command, prefix []string) [][]string {
	var out [][]string
	for _, sub := range c.Commands() {
		if sub.Hidden {
			continue
		}
		p := append(slices.Clone(prefix), sub.Name())
		out = append(out, p)
		out = append(out, commandPaths(sub, p)...)
	}
	return out
}

func TestSubcommandHelp(t *testing.T) {
	root := (&app{env: osEnv()}).newRoot()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	paths := append([][]string{nil}, commandPaths(root, nil)...)
	if len(paths) < 25 {
		t.Fatalf("found only %d commands: %v", len(paths), paths)
	}
	for _, p := range paths {
		name := strings.Join(append([]string{"dlbctl"}, p...), " ")
		t.Run(name, func(t *testing.T) {
			c, _, err := root.Find(p)
			if err != nil {
				t.Fatal(err)
			}
			// help and completion are cobra's; every other command
			// explains itself with an example.
			ours := len(p) == 0 || (p[0] != "help" && p[0] != "completion")
			if c.Short == "" || ours && c.Example == "" {
				t.Errorf("Short %q, Example %q: want both", c.Short, c.Example)
			}
			r := dlbctl("/nonexistent", append(slices.Clone(p), "--help")...)
			if r.code != exitOK || r.stderr != "" {
				t.Errorf("exit %d, stderr %q", r.code, r.stderr)
			}
			if !strings.Contains(r.stdout, "Usage:") {
				t.Errorf("help output lacks Usage:\n%s", r.stdout)
			}
		})
	}
}

func TestNATHelp(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"port", "add", "--help"}, []string{"--method string", "mac (dlbd's default) or nat", "tcp, udp or both",
			"--stickymask int", "--crossport int", "connection, affinity (dlbd's default) or conn+affin", "--maxhalfopen int", "no alert"}},
		{[]string{"port", "set", "--help"}, []string{"or nat", "--crossport 0"}},
		{[]string{"server", "add", "--help"}, []string{"method nat", "--mapport PORT", "the port the server listens on",
			"--returnaddress ADDR", "executor's interface", "--router ADDR", "another subnet", `"none" clears it`}},
		{[]string{"server", "set", "--help"}, []string{"--mapport int", "--returnaddress string", "--router string"}},
		{[]string{"executor", "set", "--help"}, []string{"clientgateway ADDR|none", "IPv4 and an IPv6 value", `"none" clears both`}},
	}
	for _, tt := range tests {
		r := dlbctl("/nonexistent", tt.args...)
		for _, want := range tt.want {
			if r.code != exitOK || !strings.Contains(r.stdout, want) {
				t.Errorf("%s: exit %d, output lacks %q:\n%s", strings.Join(tt.args, " "), r.code, want, r.stdout)
			}
		}
	}
}
