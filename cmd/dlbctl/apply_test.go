package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/api"
)

const sampleFile = "clusters:\n  - address: 198.18.0.100\n"

var sampleResult = api.ConfigResult{Applied: true, Changes: []api.ConfigChange{
	{Kind: api.ChangeRemoved, Command: "server remove 198.18.0.100@80@198.18.0.22"},
	{Kind: api.ChangeAdded, Command: "server add 198.18.0.100@80@198.18.0.21 weight 10"},
	{Kind: api.ChangeChanged, Command: "port set 198.18.0.100@80 stickytime 60", Was: "stickytime 0"},
}}

// TestApply runs "dlbctl apply" against the fake API: the file is sent
// as it is, --diff and --dry-run ask for a dry run, and the answer is
// printed as a diff (or as the API's JSON).
func TestApply(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dlb.yaml")
	if err := os.WriteFile(path, []byte(sampleFile), 0o644); err != nil {
		t.Fatal(err)
	}
	const lines = `- server remove 198.18.0.100@80@198.18.0.22
+ server add 198.18.0.100@80@198.18.0.21 weight 10
~ port set 198.18.0.100@80 stickytime 60  # was stickytime 0
`
	tests := []struct {
		name   string
		args   []string
		stdin  string
		result api.ConfigResult
		dryRun string
		stdout string
	}{
		{"apply", []string{"apply", "-f", path}, "", sampleResult, "",
			lines + "applied 3 changes: 1 added, 1 removed, 1 changed\n"},
		{"diff", []string{"apply", "-f", path, "--diff"}, "", api.ConfigResult{Changes: sampleResult.Changes}, "true",
			lines + "would apply 3 changes: 1 added, 1 removed, 1 changed (nothing was changed)\n"},
		{"dry run", []string{"apply", "--dry-run", "--filename", path}, "", api.ConfigResult{Changes: sampleResult.Changes[:1]}, "true",
			"- server remove 198.18.0.100@80@198.18.0.22\nwould apply 1 change: 1 removed (nothing was changed)\n"},
		{"standard input", []string{"apply", "-f", "-"}, sampleFile, api.ConfigResult{Changes: []api.ConfigChange{}}, "", "no changes\n"},
		{"JSON", []string{"apply", "-f", path, "-o", "json"}, "", sampleResult, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eng := &fakeEngine{configResult: tt.result}
			r := runIn(map[string]string{"DLB_SOCKET": serve(t, eng)}, tt.stdin, tt.args...)
			if r.code != exitOK {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			if len(eng.posted) != 1 || eng.posted[0].body != sampleFile || eng.posted[0].dryRun != tt.dryRun {
				t.Fatalf("posted %+v, want the file with dry_run %q", eng.posted, tt.dryRun)
			}
			if tt.name == "JSON" {
				var got api.ConfigResult
				if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || !reflect.DeepEqual(got, tt.result) {
					t.Errorf("stdout %s (%v), want %+v", r.stdout, err, tt.result)
				}
				return
			}
			if r.stdout != tt.stdout {
				t.Errorf("stdout\n%s\nwant\n%s", r.stdout, tt.stdout)
			}
		})
	}
}

// TestApplyFails: a refused file changes nothing and says where it is
// wrong; usage errors and a file that cannot be read send nothing.
func TestApplyFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dlb.yaml")
	if err := os.WriteFile(path, []byte(sampleFile), 0o644); err != nil {
		t.Fatal(err)
	}
	refusal := errors.New("line 2: clusters[0].address: equals the non-forwarding address (nfa)")
	tests := []struct {
		name   string
		args   []string
		refuse error
		code   int
		stderr string
		posts  int
	}{
		{"refused", []string{"apply", "-f", path}, refusal, exitFailed,
			"dlbctl: " + path + ": line 2: clusters[0].address: equals the non-forwarding address (nfa) (nothing was changed)\n", 1},
		{"refused from standard input", []string{"apply", "-f", "-"}, refusal, exitFailed,
			"dlbctl: standard input: line 2: clusters[0].address: equals the non-forwarding address (nfa) (nothing was changed)\n", 1},
		{"no file", []string{"apply"}, nil, exitUsage, "dlbctl: required flag(s) \"filename\" not set\nRun 'dlbctl apply --help' for usage.\n", 0},
		{"a missing file", []string{"apply", "-f", path + ".nope"}, nil, exitFailed,
			"dlbctl: reading the configuration file: open " + path + ".nope: no such file or directory\n", 0},
		{"arguments", []string{"apply", "-f", path, "extra"}, nil, exitUsage, "dlbctl: apply takes no arguments (got \"extra\")\nRun 'dlbctl apply --help' for usage.\n", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eng := &fakeEngine{refuse: tt.refuse}
			r := runIn(map[string]string{"DLB_SOCKET": serve(t, eng)}, sampleFile, tt.args...)
			if r.code != tt.code || r.stderr != tt.stderr {
				t.Errorf("exit %d, stderr %q; want %d, %q", r.code, r.stderr, tt.code, tt.stderr)
			}
			if len(eng.posted) != tt.posts {
				t.Errorf("%d files posted, want %d", len(eng.posted), tt.posts)
			}
		})
	}
	// dlbd not running.
	r := dlbctl(filepath.Join(t.TempDir(), "none.sock"), "apply", "-f", path)
	if r.code != exitUnreachable {
		t.Errorf("unreachable: exit %d, %s", r.code, r.stderr)
	}
}

// TestGet prints the file dlbd sends, asking for JSON with -o json and
// YAML otherwise.
func TestGet(t *testing.T) {
	eng := &fakeEngine{configFiles: map[string]string{"yaml": "clusters: []\n", "json": "{}\n"}}
	sock := serve(t, eng)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"get"}, "clusters: []\n"},
		{[]string{"get", "-o", "yaml"}, "clusters: []\n"},
		{[]string{"get", "-o", "table"}, "clusters: []\n"},
		{[]string{"get", "-o", "json"}, "{}\n"},
	} {
		r := dlbctl(sock, tt.args...)
		if r.code != exitOK || r.stdout != tt.want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %q", tt.args, r.code, r.stdout, r.stderr, tt.want)
		}
	}
	if r := dlbctl(sock, "get", "config"); r.code != exitUsage {
		t.Errorf("get with an argument: exit %d", r.code)
	}
}

// TestApplyRoundTrip runs the real engine behind a fake kernel: what
// "get" prints, "apply" finds nothing to change in; applied to an empty
// dlbd it recreates the configuration exactly; and the changes "apply
// --diff" lists are dlbctl commands that, loaded as a script into
// another empty dlbd, recreate it too.
func TestApplyRoundTrip(t *testing.T) {
	a := realDaemon(t)
	for _, cmd := range []string{
		"executor set nfa 192.0.2.10 fintimeout 30",
		"cluster add 10.0.0.100+10.0.0.101",
		"cluster set 10.0.0.101 --configure=true",
		"port add @80 --weightbound 50",
		"port add 10.0.0.100@53 --protocol both --staletimeout 30",
		"server add @80@10.1.1.5+10.1.1.6 --weight 7",
		"server add 10.0.0.100@53@10.1.1.9 --advisorrequest x --advisorresponse 'y z'",
		"server down 10.0.0.101@80@10.1.1.6",
		"server set 10.0.0.100@80@10.1.1.6 --weight 0 --fixedweight yes",
		"executor set nfa 2001:2::2",
		"executor set clientgateway 10.0.0.1",
		"port add 10.0.0.100@443 --method nat --stickytime 60 --stickymask 24 --selectionalgorithm conn+affin --maxhalfopen 500 --alldown spread",
		"port add 10.0.0.100@8443 --stickytime 60 --crossport 443 --tablesize 65537",
		"server add 10.0.0.100@443@10.2.0.5 --returnaddress 10.0.0.3 --router 10.0.0.254 --mapport 8443",
		"server add 10.0.0.100@443@10.0.0.7 --returnaddress 10.0.0.3",
		"cluster add 2001:2::100",
		"port add 2001:2::100@80 --stickytime 30 --stickymask 64 --protocol udp",
		"server add 2001:2::100@80@2001:2::21",
		"advisor start http 80 --interval 3 --fall 2",
		"advisor start connect 10.0.0.100@53 --rise 1",
		"metric add 10.0.0.101@cpuload+memload",
		"metric set --source prometheus --port 9200",
		"manager quiesce 10.0.0.100@80@10.1.1.5 --now",
		"manager set interval 1 smoothing 2",
		"manager start",
		"executor start --interface eth0 --xdp-mode native",
	} {
		if r := dlbctl(a, splitArgs(t, cmd)...); r.code != exitOK {
			t.Fatalf("%s: exit %d: %s", cmd, r.code, r.stderr)
		}
	}
	get := func(sock string, args ...string) string {
		t.Helper()
		r := dlbctl(sock, append([]string{"get"}, args...)...)
		if r.code != exitOK {
			t.Fatalf("get: exit %d: %s", r.code, r.stderr)
		}
		return r.stdout
	}
	file := get(a, "-o", "yaml")

	// get | apply -f -: nothing to change.
	if r := runIn(map[string]string{"DLB_SOCKET": a}, file, "apply", "-f", "-"); r.code != exitOK || r.stdout != "no changes\n" {
		t.Fatalf("applying what get printed: exit %d, %q, %s", r.code, r.stdout, r.stderr)
	}
	// The JSON form too.
	if r := runIn(map[string]string{"DLB_SOCKET": a}, get(a, "-o", "json"), "apply", "-f", "-"); r.code != exitOK || r.stdout != "no changes\n" {
		t.Fatalf("applying what get -o json printed: exit %d, %q, %s", r.code, r.stdout, r.stderr)
	}

	// To an empty dlbd: the diff first (nothing changed), then the file.
	b := realDaemon(t)
	empty := get(b)
	diff := runIn(map[string]string{"DLB_SOCKET": b}, file, "apply", "-f", "-", "--diff")
	if diff.code != exitOK || get(b) != empty {
		t.Fatalf("--diff: exit %d (%s), or it changed the configuration", diff.code, diff.stderr)
	}
	applied := strings.Replace(strings.Replace(diff.stdout, "\nwould apply ", "\napplied ", 1), " (nothing was changed)\n", "\n", 1)
	if r := runIn(map[string]string{"DLB_SOCKET": b}, file, "apply", "-f", "-"); r.code != exitOK || r.stdout != applied {
		t.Fatalf("apply: exit %d: %s\n%s\nthe diff said\n%s", r.code, r.stderr, r.stdout, diff.stdout)
	}
	if got := get(b); got != file {
		t.Errorf("the configuration applied to an empty dlbd differs:\n%s\nwant\n%s", got, file)
	}
	// The diff's lines are dlbctl commands that make the same change.
	var script strings.Builder
	for _, l := range strings.Split(diff.stdout, "\n") {
		if len(l) > 2 && strings.Contains("+-~", l[:1]) && l[1] == ' ' {
			script.WriteString(l[2:] + "\n")
		}
	}
	path := filepath.Join(t.TempDir(), "diff.cfg")
	if err := os.WriteFile(path, []byte(script.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	c := realDaemon(t)
	if r := dlbctl(c, "file", "load", path); r.code != exitOK {
		t.Fatalf("loading the diff as a script: exit %d: %s\n%s", r.code, r.stderr, script.String())
	}
	if got := get(c); got != file {
		t.Errorf("the diff loaded as a script makes\n%s\nwant\n%s", got, file)
	}

	// A change to the file: only it is listed, and applied.
	edited := strings.Replace(file, "weight: 7", "weight: 6", 1)
	r := runIn(map[string]string{"DLB_SOCKET": a}, edited, "apply", "-f", "-")
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "~ server set 10.0.0.100@80@10.1.1.5 weight 6  # was weight 7\n") ||
		!strings.HasSuffix(r.stdout, "applied 1 change: 1 changed\n") {
		t.Errorf("one edit: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
}

// splitArgs splits a command line as a script line is split.
func splitArgs(t *testing.T, line string) []string {
	t.Helper()
	w, err := splitWords(line)
	if err != nil {
		t.Fatal(err)
	}
	return w
}
