package main

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/api"
)

// IBM's forms become the wire grammar: ':' separators, bracketed IPv6,
// "::" wildcards, keyword-value pairs after the target, and host names,
// resolved once (testHosts) with a line saying to what.
func TestIBMForms(t *testing.T) {
	const (
		cl = api.ObjectCluster
		po = api.ObjectPort
		sv = api.ObjectServer
	)
	tests := []struct {
		args   []string
		want   api.Op
		stderr string // the resolution lines
	}{
		// Separators.
		{[]string{"server", "add", "9.67.131.153:80:10.0.0.5"}, api.Op{Object: sv, Action: api.ActionAdd, Target: "9.67.131.153@80@10.0.0.5"}, ""},
		{[]string{"server", "add", "198.18.0.100:80+443:198.18.0.21+198.18.0.22"},
			api.Op{Object: sv, Action: api.ActionAdd, Target: "198.18.0.100@80+443@198.18.0.21+198.18.0.22"}, ""},
		{[]string{"server", "add", "[2001:2::100]:80:[2001:2::21]"}, api.Op{Object: sv, Action: api.ActionAdd, Target: "2001:2::100@80@2001:2::21"}, ""},
		{[]string{"server", "add", "[2001:2::100]+[2001:2::101]:80:[2001:2::21]"},
			api.Op{Object: sv, Action: api.ActionAdd, Target: "2001:2::100+2001:2::101@80@2001:2::21"}, ""},
		{[]string{"server", "add", "[2001:2::100]@80@[2001:2::21]"}, api.Op{Object: sv, Action: api.ActionAdd, Target: "2001:2::100@80@2001:2::21"}, ""},
		// The wire form is untouched, unbracketed IPv6 included.
		{[]string{"server", "add", "2001:2::100@80@2001:2::21"}, api.Op{Object: sv, Action: api.ActionAdd, Target: "2001:2::100@80@2001:2::21"}, ""},
		{[]string{"cluster", "add", "2001:2::100"}, api.Op{Object: cl, Action: api.ActionAdd, Target: "2001:2::100"}, ""},
		{[]string{"cluster", "add", "2001:2::100+2001:2::101"}, api.Op{Object: cl, Action: api.ActionAdd, Target: "2001:2::100+2001:2::101"}, ""},
		{[]string{"port", "add", "[2001:2::100]:443"}, api.Op{Object: po, Action: api.ActionAdd, Target: "2001:2::100@443"}, ""},
		{[]string{"port", "remove", "198.18.0.100:80"}, api.Op{Object: po, Action: api.ActionRemove, Target: "198.18.0.100@80"}, ""},
		// Wildcards.
		{[]string{"server", "down", "::"}, api.Op{Object: sv, Action: api.ActionDown, Target: "@@"}, ""},
		{[]string{"server", "up", ":80:"}, api.Op{Object: sv, Action: api.ActionUp, Target: "@80@"}, ""},
		{[]string{"server", "remove", "::198.18.0.21"}, api.Op{Object: sv, Action: api.ActionRemove, Target: "@@198.18.0.21"}, ""},
		// Host names, resolved to the family of the target's addresses.
		{[]string{"server", "add", "198.18.0.100:80:server1"}, api.Op{Object: sv, Action: api.ActionAdd, Target: "198.18.0.100@80@198.18.0.21"},
			"dlbctl: server1 resolved to 198.18.0.21\n"},
		{[]string{"server", "add", "vip1:80:server1+server2"}, api.Op{Object: sv, Action: api.ActionAdd, Target: "198.18.0.100@80@198.18.0.21+198.18.0.22"},
			"dlbctl: vip1 resolved to 198.18.0.100\ndlbctl: server1 resolved to 198.18.0.21\ndlbctl: server2 resolved to 198.18.0.22\n"},
		{[]string{"server", "add", "[2001:2::100]:80:dual"}, api.Op{Object: sv, Action: api.ActionAdd, Target: "2001:2::100@80@2001:2::23"},
			"dlbctl: dual resolved to 2001:2::23\n"},
		{[]string{"server", "add", "198.18.0.100@80@dual"}, api.Op{Object: sv, Action: api.ActionAdd, Target: "198.18.0.100@80@198.18.0.23"},
			"dlbctl: dual resolved to 198.18.0.23\n"},
		{[]string{"server", "add", "vip6@80@web6"}, api.Op{Object: sv, Action: api.ActionAdd, Target: "2001:2::100@80@2001:2::21"},
			"dlbctl: vip6 resolved to 2001:2::100\ndlbctl: web6 resolved to 2001:2::21\n"},
		{[]string{"server", "add", "198.18.0.100:80:My-Host.lab"}, api.Op{Object: sv, Action: api.ActionAdd, Target: "198.18.0.100@80@198.18.0.40"},
			"dlbctl: My-Host.lab resolved to 198.18.0.40\n"},
		{[]string{"cluster", "remove", "vip6"}, api.Op{Object: cl, Action: api.ActionRemove, Target: "2001:2::100"},
			"dlbctl: vip6 resolved to 2001:2::100\n"},
		// Something that is neither an address nor a name goes to dlbd,
		// which refuses it by field.
		{[]string{"server", "add", "198.18.0.100:80:198.18.0.300"}, api.Op{Object: sv, Action: api.ActionAdd, Target: "198.18.0.100@80@198.18.0.300"}, ""},
		// Keyword-value pairs stand for the flags, unique prefixes too.
		{[]string{"server", "set", "198.18.0.100:80:198.18.0.21", "weight", "5"},
			api.Op{Object: sv, Action: api.ActionSet, Target: "198.18.0.100@80@198.18.0.21", Weight: ptr[int64](5)}, ""},
		{[]string{"server", "set", "198.18.0.100@80@198.18.0.21", "w", "0", "fixed", "yes"},
			api.Op{Object: sv, Action: api.ActionSet, Target: "198.18.0.100@80@198.18.0.21", Weight: ptr[int64](0), FixedWeight: ptr(true)}, ""},
		{[]string{"server", "add", "198.18.0.100:80:198.18.0.21", "weight", "3", "--mapport", "8080"},
			api.Op{Object: sv, Action: api.ActionAdd, Target: "198.18.0.100@80@198.18.0.21", Weight: ptr[int64](3), MapPort: ptr[int64](8080)}, ""},
		{[]string{"server", "set", "198.18.0.100:80:198.18.0.21", "router", "gw1", "returnaddress", "198.18.0.3"},
			api.Op{Object: sv, Action: api.ActionSet, Target: "198.18.0.100@80@198.18.0.21", Router: ptr("198.18.0.254"), ReturnAddress: ptr("198.18.0.3")},
			"dlbctl: gw1 resolved to 198.18.0.254\n"},
		{[]string{"server", "set", "198.18.0.100:80:198.18.0.21", "--router", "gw1"},
			api.Op{Object: sv, Action: api.ActionSet, Target: "198.18.0.100@80@198.18.0.21", Router: ptr("198.18.0.254")},
			"dlbctl: gw1 resolved to 198.18.0.254\n"},
		{[]string{"server", "set", "198.18.0.100:80:198.18.0.21", "router", "none"},
			api.Op{Object: sv, Action: api.ActionSet, Target: "198.18.0.100@80@198.18.0.21", Router: ptr("none")}, ""},
		{[]string{"server", "set", "[2001:2::100]:80:[2001:2::21]", "router", "dual"},
			api.Op{Object: sv, Action: api.ActionSet, Target: "2001:2::100@80@2001:2::21", Router: ptr("2001:2::23")},
			"dlbctl: dual resolved to 2001:2::23\n"},
		{[]string{"server", "set", "198.18.0.100:80:198.18.0.21", "advisorrequest", "GET /health HTTP/1.0"},
			api.Op{Object: sv, Action: api.ActionSet, Target: "198.18.0.100@80@198.18.0.21", AdvisorRequest: ptr("GET /health HTTP/1.0")}, ""},
		{[]string{"cluster", "set", "198.18.0.100", "proportions", "49", "50", "1", "0"},
			api.Op{Object: cl, Action: api.ActionSet, Target: "198.18.0.100", Proportions: []int64{49, 50, 1, 0}}, ""},
		{[]string{"cluster", "set", "198.18.0.100", "prop", "49", "50", "1", "0", "configure", "no"},
			api.Op{Object: cl, Action: api.ActionSet, Target: "198.18.0.100", Proportions: []int64{49, 50, 1, 0}, Configure: ptr(false)}, ""},
		// The flag form of proportions, IBM style and quoted.
		{[]string{"cluster", "set", "198.18.0.100", "--proportions", "40", "40", "20", "0"},
			api.Op{Object: cl, Action: api.ActionSet, Target: "198.18.0.100", Proportions: []int64{40, 40, 20, 0}}, ""},
		{[]string{"cluster", "set", "198.18.0.100", "--proportions", "30,30,40,0", "configure", "yes"},
			api.Op{Object: cl, Action: api.ActionSet, Target: "198.18.0.100", Proportions: []int64{30, 30, 40, 0}, Configure: ptr(true)}, ""},
		{[]string{"cluster", "add", "vip1", "configure", "yes"}, api.Op{Object: cl, Action: api.ActionAdd, Target: "198.18.0.100", Configure: ptr(true)},
			"dlbctl: vip1 resolved to 198.18.0.100\n"},
		{[]string{"port", "set", "198.18.0.100:80", "staletimeout", "30"},
			api.Op{Object: po, Action: api.ActionSet, Target: "198.18.0.100@80", StaleTimeout: ptr[int64](30)}, ""},
		{[]string{"port", "add", "198.18.0.100:53", "protocol", "both", "method", "nat", "stickyt", "60"},
			api.Op{Object: po, Action: api.ActionAdd, Target: "198.18.0.100@53", Protocol: ptr("both"), Method: ptr("nat"), StickyTime: ptr[int64](60)}, ""},
		{[]string{"port", "set", "@80", "weightbound", "10"}, api.Op{Object: po, Action: api.ActionSet, Target: "@80", WeightBound: ptr[int64](10)}, ""},
		// Address parameters and other targets.
		{[]string{"executor", "set", "nfa", "server1"}, api.Op{Object: api.ObjectExecutor, Action: api.ActionSet, NFA: ptr("198.18.0.21")},
			"dlbctl: server1 resolved to 198.18.0.21\n"},
		{[]string{"executor", "set", "clientgateway", "[2001:2::1]", "nfa", "none"},
			api.Op{Object: api.ObjectExecutor, Action: api.ActionSet, ClientGateway: ptr("2001:2::1"), NFA: ptr("none")}, ""},
		{[]string{"advisor", "start", "http", "198.18.0.100:80"},
			api.Op{Object: api.ObjectAdvisor, Action: api.ActionStart, Advisor: ptr("http"), Target: "198.18.0.100@80"}, ""},
		{[]string{"advisor", "stop", "http", "vip1@80"},
			api.Op{Object: api.ObjectAdvisor, Action: api.ActionStop, Advisor: ptr("http"), Target: "198.18.0.100@80"}, "dlbctl: vip1 resolved to 198.18.0.100\n"},
		{[]string{"advisor", "start", "http", "80"}, api.Op{Object: api.ObjectAdvisor, Action: api.ActionStart, Advisor: ptr("http"), Target: "@80"}, ""},
		{[]string{"manager", "quiesce", "server1"}, api.Op{Object: api.ObjectManager, Action: api.ActionQuiesce, Target: "198.18.0.21"},
			"dlbctl: server1 resolved to 198.18.0.21\n"},
		{[]string{"manager", "unquiesce", "198.18.0.100:80:server1"},
			api.Op{Object: api.ObjectManager, Action: api.ActionUnquiesce, Target: "198.18.0.100@80@198.18.0.21"}, "dlbctl: server1 resolved to 198.18.0.21\n"},
		{[]string{"manager", "quiesce", "2001:2::21"}, api.Op{Object: api.ObjectManager, Action: api.ActionQuiesce, Target: "2001:2::21"}, ""},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			eng := &fakeEngine{}
			r := dlbctl(serve(t, eng), tt.args...)
			if r.code != exitOK || r.stderr != tt.stderr {
				t.Fatalf("exit %d, stderr %q; want 0 and %q", r.code, r.stderr, tt.stderr)
			}
			got := eng.sent()
			if len(got) != 1 || len(got[0]) != 1 || !reflect.DeepEqual(got[0][0], tt.want) {
				t.Errorf("sent %s\nwant %s", opJSON(slices.Concat(got...)...), opJSON(tt.want))
			}
		})
	}
}

// Reports take partial targets and the wildcards "::" and ":".
func TestIBMReportTargets(t *testing.T) {
	tests := []struct {
		args   []string
		target string // asked of dlbd
	}{
		{[]string{"server", "report", "::"}, "@@"},
		{[]string{"server", "report", ":"}, "@@"},
		{[]string{"port", "report", "::"}, "@"},
		{[]string{"cluster", "report", "::"}, ""},
		{[]string{"server", "report", "198.18.0.100@80"}, "198.18.0.100@80@"},
		{[]string{"server", "report", "198.18.0.100:80"}, "198.18.0.100@80@"},
		{[]string{"server", "report", "198.18.0.100"}, "198.18.0.100@@"},
		{[]string{"server", "report", "198.18.0.100@80@"}, "198.18.0.100@80@"},
		{[]string{"server", "report", "@@198.18.0.21"}, "@@198.18.0.21"},
		{[]string{"server", "report", "::server1"}, "@@198.18.0.21"},
		{[]string{"server", "report", "vip1:80"}, "198.18.0.100@80@"},
		{[]string{"server", "report", "[2001:2::100]"}, "2001:2::100@@"},
		{[]string{"server", "report", "2001:2::100"}, "2001:2::100@@"},
		{[]string{"server", "report", "[2001:2::100]:80"}, "2001:2::100@80@"},
		{[]string{"port", "report", "198.18.0.100"}, "198.18.0.100@"},
		{[]string{"port", "report", "@80"}, "@80"},
		{[]string{"cluster", "report", "2001:2::100"}, "2001:2::100"},
		{[]string{"cluster", "report", "vip1"}, "198.18.0.100"},
		{[]string{"server", "report"}, ""},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			eng := &fakeEngine{}
			r := dlbctl(serve(t, eng), append(tt.args, "-o", "json")...)
			if r.code != exitOK {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			eng.mu.Lock()
			defer eng.mu.Unlock()
			if len(eng.targets) != 1 || eng.targets[0] != tt.target {
				t.Errorf("dlbd was asked for %q, want %q", eng.targets, tt.target)
			}
		})
	}
}

// What cannot be understood, or is ambiguous, is refused by dlbctl with a
// message that says why, and nothing is sent.
func TestIBMRefusals(t *testing.T) {
	tests := []struct {
		args []string
		want string // in stderr
		help bool   // the message points to --help
	}{
		{[]string{"server", "add", "198.18.0.100:80@198.18.0.21"}, `"198.18.0.100:80@198.18.0.21" mixes ':' and '@' as separators`, true},
		{[]string{"server", "add", "198.18.0.100@80:443@198.18.0.21"}, `mixes ':' and '@'`, true},
		{[]string{"port", "add", "[2001:2::100]@80:81"}, `mixes ':' and '@'`, true},
		{[]string{"server", "add", "2001:2::100:80:2001:2::21"},
			`does not have the form VIP@PORT@ADDR or VIP:PORT:ADDR; with ':' as the separator, IPv6 addresses go in brackets`, true},
		{[]string{"port", "add", "2001:2::100:80"}, "does not have the form VIP@PORT or VIP:PORT; with ':' as the separator, IPv6 addresses go in brackets", true},
		{[]string{"server", "add", "[2001:2::100:80:[2001:2::21]"}, "unbalanced brackets", true},
		{[]string{"server", "add", "[2001:2::100]]:80:[2001:2::21]"}, "unbalanced brackets", true},
		{[]string{"server", "add", "[198.18.0.1]:80:198.18.0.2"}, `"[198.18.0.1]" in "[198.18.0.1]:80:198.18.0.2": brackets enclose an IPv6 address`, true},
		{[]string{"server", "add", "198.18.0.100:80"}, `"198.18.0.100:80" does not have the form VIP@PORT@ADDR or VIP:PORT:ADDR`, true},
		{[]string{"server", "report", "198.18.0.100:80:198.18.0.21:5"}, "does not have the form VIP@PORT@ADDR", true},
		{[]string{"cluster", "report", "198.18.0.100@80"}, `"198.18.0.100@80" does not have the form VIP`, true},
		{[]string{"cluster", "add", "::"}, `"::" is not a cluster address`, true},
		// Host names that cannot be used are bad values (exit 1, as
		// dlbd's refusal of a bad address), named by field.
		{[]string{"server", "add", "198.18.0.100:80:nosuch"}, `dlbctl: server: cannot resolve "nosuch": no such host` + "\n", false},
		{[]string{"server", "add", "nosuch:80:198.18.0.21"}, `dlbctl: cluster: cannot resolve "nosuch": no such host` + "\n", false},
		{[]string{"server", "add", "198.18.0.100:80:broken.example"}, `server: cannot resolve "broken.example": lookup broken.example: server misbehaving`, false},
		{[]string{"server", "add", "198.18.0.100:80:noaddr"}, `server: cannot resolve "noaddr": it has no address`, false},
		{[]string{"server", "add", "198.18.0.100:80:twin"}, `server: "twin" is ambiguous: it resolves to 198.18.0.31 and 198.18.0.32; give the address of the one meant`, false},
		{[]string{"server", "add", "@80@dual"}, `"dual" is ambiguous: it resolves to 198.18.0.23 and 2001:2::23`, false},
		{[]string{"server", "add", "198.18.0.100:80:web6"}, `"web6" resolves to 2001:2::21, none of them an IPv4 address like the others of the target`, false},
		{[]string{"executor", "set", "nfa", "dual"}, `nfa: "dual" is ambiguous`, false},
		{[]string{"executor", "set", "clientgateway", "not-an-address"}, `clientgateway: cannot resolve "not-an-address"`, false},
		{[]string{"server", "set", "198.18.0.100:80:198.18.0.21", "router", "nosuch"}, `router: cannot resolve "nosuch"`, false},
		{[]string{"manager", "quiesce", "nosuch"}, `server: cannot resolve "nosuch"`, false},
		// Keywords.
		{[]string{"server", "set", "198.18.0.100:80:198.18.0.21", "bogus", "5"}, `unknown keyword "bogus" for server set (keywords: advisorrequest, ` +
			`advisorresponse, fixedweight, mapport, returnaddress, router, weight)`, true},
		{[]string{"port", "set", "198.18.0.100:80", "st", "30"}, `ambiguous keyword "st" for port set: staletimeout or stickymask or stickytime`, true},
		{[]string{"server", "set", "198.18.0.100:80:198.18.0.21", "weight"}, "keyword weight needs a value", true},
		{[]string{"server", "set", "198.18.0.100:80:198.18.0.21", "weight", "abc"}, `keyword weight: invalid value "abc": invalid syntax`, true},
		{[]string{"server", "set", "198.18.0.100:80:198.18.0.21", "--weight", "5", "weight", "6"}, "weight given twice", true},
		{[]string{"server", "set", "198.18.0.100:80:198.18.0.21", "weight", "5", "w", "6"}, "weight given twice", true},
		{[]string{"cluster", "set", "198.18.0.100", "proportions", "1", "2", "3"}, "keyword proportions needs its N N N N", true},
		{[]string{"cluster", "set", "198.18.0.100", "proportions", "1", "2", "3", "x"}, `--proportions: "x" is not an integer`, true},
		{[]string{"cluster", "set", "198.18.0.100", "configure", "maybe"}, `keyword configure: "maybe" is not yes or no`, true},
		{[]string{"cluster", "set", "198.18.0.100", "--proportions", "40", "40"}, "--proportions needs 4 numbers (active new port system), got 2", true},
		{[]string{"cluster", "report", "a", "b"}, "cluster report takes one target (VIP), got 2 arguments", true},
		{[]string{"port", "remove", "198.18.0.100:80", "weightbound", "5"}, "port remove takes one target", true},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			eng := &fakeEngine{}
			r := dlbctl(serve(t, eng), tt.args...)
			// Usage errors point to --help; bad host names do not, and
			// are failed commands.
			want := exitUsage
			if !tt.help {
				want = exitFailed
			}
			if r.code != want {
				t.Errorf("exit %d, want %d; stderr %q", r.code, want, r.stderr)
			}
			if !strings.HasPrefix(r.stderr, "dlbctl: ") || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("stderr %q, want it to contain %q", r.stderr, tt.want)
			}
			if got := strings.Contains(r.stderr, "--help' for usage"); got != tt.help {
				t.Errorf("stderr %q: points to --help %v, want %v", r.stderr, got, tt.help)
			}
			if got := eng.sent(); len(got) != 0 {
				t.Errorf("sent %v, want nothing", got)
			}
			eng.mu.Lock()
			defer eng.mu.Unlock()
			if len(eng.targets) != 0 {
				t.Errorf("reported %v, want nothing", eng.targets)
			}
		})
	}
}

// A script line is parsed like the command line: IBM's forms and host
// names work in "file load" too.
func TestIBMFormsInScript(t *testing.T) {
	eng := &fakeEngine{}
	path := writeTemp(t, "dlbctl cluster add vip1\nport add vip1:80 staletimeout 30\nserver add vip1:80:server1 weight 5\n")
	r := dlbctl(serve(t, eng), "file", "load", path)
	if r.code != exitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	want := []api.Op{
		{Object: api.ObjectCluster, Action: api.ActionAdd, Target: "198.18.0.100"},
		{Object: api.ObjectPort, Action: api.ActionAdd, Target: "198.18.0.100@80", StaleTimeout: ptr[int64](30)},
		{Object: api.ObjectServer, Action: api.ActionAdd, Target: "198.18.0.100@80@198.18.0.21", Weight: ptr[int64](5)},
	}
	got := eng.sent()
	if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Errorf("sent %s\nwant %s", opJSON(slices.Concat(got...)...), opJSON(want...))
	}
	if !strings.Contains(r.stderr, "dlbctl: server1 resolved to 198.18.0.21\n") {
		t.Errorf("stderr %q does not say what server1 resolved to", r.stderr)
	}
}

func TestIsHostName(t *testing.T) {
	for s, want := range map[string]bool{
		"server1": true, "web-1.example.com": true, "web-1.example.com.": true, "_srv.lab": true, "a": true,
		"10.0.0.300": false, "1234": false, "": false, "-web": false, "web-": false, "a..b": false, "web server": false,
		"web/1": false, "[::1]": false, strings.Repeat("a", 64): false, "x." + strings.Repeat("a", 63): true,
	} {
		if got := isHostName(s); got != want {
			t.Errorf("isHostName(%q) = %v, want %v", s, got, want)
		}
	}
}
