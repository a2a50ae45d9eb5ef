package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/dispatcher"
	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/server"
)

// TestFileSave: file save writes a header and the script dlbd gives,
// atomically, and says what it saved.
func TestFileSave(t *testing.T) {
	script := "\ncluster add 10.0.0.100\nport add 10.0.0.100@80 --protocol tcp --method mac --staletimeout 300 --weightbound 20\n" +
		"server add 10.0.0.100@80@10.1.1.5+10.1.1.6 --weight 20\n"
	eng := &fakeEngine{script: script}
	sock := serve(t, eng)
	path := filepath.Join(t.TempDir(), "dlb.cfg")
	r := dlbctl(sock, "file", "save", path)
	if r.code != exitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if want := "saved 1 cluster, 1 port and 2 servers to " + path + "\n"; r.stdout != want {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "# dlb configuration saved by \"dlbctl file save\" from " + sock + "\n# on 2025-06-01T12:30:00Z.\n" +
		"# \"dlbctl file load FILE\" applies it as one batch: all or nothing.\n" + script
	if string(data) != want {
		t.Errorf("saved\n%s\nwant\n%s", data, want)
	}
	// "-" writes the same script to stdout.
	if r := dlbctl(sock, "file", "save", "-"); r.code != exitOK || r.stdout != string(data) {
		t.Errorf("file save -: exit %d, stdout\n%s", r.code, r.stdout)
	}
}

// TestOldScriptLoads: a script "file save" wrote before dlbd wrote the
// scripts itself (testdata/save.golden) still loads, into the
// configuration it describes.
func TestOldScriptLoads(t *testing.T) {
	a := realDaemon(t)
	if r := dlbctl(a, "file", "load", filepath.Join("testdata", "save.golden")); r.code != exitOK {
		t.Fatalf("load: exit %d: %s", r.code, r.stderr)
	}
	var servers []api.ServerReport
	r := dlbctl(a, "server", "report", "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &servers); err != nil || len(servers) != 5 {
		t.Fatalf("servers %v (%v): %s", servers, err, r.stdout)
	}
	for _, s := range servers {
		if s.Address == "10.1.1.6" && s.State != api.StateDown {
			t.Errorf("10.1.1.6 is %s, want down", s.State)
		}
		if s.Address == "198.18.1.11" && (s.MapPort != 443 || s.ReturnAddress != "10.0.0.3" || s.Router != "198.18.0.254") {
			t.Errorf("NAT server %+v", s)
		}
	}
	if ex := executorConfig(t, a); !ex.Started || ex.FinTimeout != 30 || ex.NFA6 != "2001:2::2" {
		t.Errorf("executor %+v", ex)
	}
}

func TestFileSaveOverwrite(t *testing.T) {
	eng := &fakeEngine{script: "\ncluster add 10.0.0.100\n"}
	sock := serve(t, eng)
	dir := t.TempDir()
	path := filepath.Join(dir, "dlb.cfg")
	if err := os.WriteFile(path, []byte("keep me\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	r := dlbctl(sock, "file", "save", path)
	if r.code != exitUsage || !strings.Contains(r.stderr, path+" exists; use --force to overwrite it") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
	if data, _ := os.ReadFile(path); string(data) != "keep me\n" {
		t.Errorf("file was changed to %q", data)
	}
	if n := eng.requestCount(); n != 0 {
		t.Errorf("dlbd was asked %d times before the check", n)
	}

	r = dlbctl(sock, "file", "save", "--force", path)
	if r.code != exitOK {
		t.Fatalf("--force: exit %d: %s", r.code, r.stderr)
	}
	data, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(data), "# dlb configuration") {
		t.Errorf("--force did not replace the file: %q", data)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v (%v), want the replaced file's 0600", fi.Mode(), err)
	}
	// No temporary file is left behind.
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %v, want only dlb.cfg", entries)
	}

	// A symbolic link stays, and the file it leads to is replaced.
	real := filepath.Join(dir, "real.cfg")
	if err := os.WriteFile(real, []byte("old\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.cfg")
	if err := os.Symlink("real.cfg", link); err != nil {
		t.Fatal(err)
	}
	if r := dlbctl(sock, "file", "save", "--force", link); r.code != exitOK {
		t.Fatalf("--force through a link: exit %d: %s", r.code, r.stderr)
	}
	if to, err := os.Readlink(link); err != nil || to != "real.cfg" {
		t.Errorf("the link now: %q, %v", to, err)
	}
	if data, _ := os.ReadFile(real); !strings.HasPrefix(string(data), "# dlb configuration") {
		t.Errorf("the linked file holds %q", data)
	}
	if fi, err := os.Stat(real); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("the linked file's mode %v (%v), want 0640", fi.Mode(), err)
	}

	// Not a regular file: refused before dlbd is asked, left alone.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	toNull := filepath.Join(dir, "null")
	if err := os.Symlink("/dev/null", toNull); err != nil {
		t.Fatal(err)
	}
	n := eng.requestCount()
	for _, c := range []struct{ path, want string }{
		{fifo, fifo + " is a named pipe, not a regular file"},
		{dir, dir + " is a directory, not a regular file"},
		{toNull, toNull + " is a character device, not a regular file"},
	} {
		// Said so with --force and without it (not "exists; use --force",
		// which could not help).
		for _, args := range [][]string{{"file", "save", "--force", c.path}, {"file", "save", c.path}} {
			r := dlbctl(sock, args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
				t.Errorf("dlbctl %v: exit %d, stderr %q, want %q", args, r.code, r.stderr, c.want)
			}
		}
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the named pipe now: %v, %v", fi, err)
	}
	if fi, err := os.Lstat(toNull); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link to /dev/null now: %v, %v", fi, err)
	}
	if eng.requestCount() != n {
		t.Errorf("dlbd was asked for a save that could not be written")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 5 {
		t.Errorf("directory holds %v, want dlb.cfg, real.cfg, link.cfg, fifo and null", entries)
	}

	// A directory that does not exist fails without a usage error.
	r = dlbctl(sock, "file", "save", filepath.Join(dir, "no", "such", "dir.cfg"))
	if r.code != exitFailed || !strings.Contains(r.stderr, "creating") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
}

// writeTemp writes a script into a temporary directory.
func writeTemp(t *testing.T, script string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "test.cfg")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestFileLoad(t *testing.T) {
	eng := &fakeEngine{}
	path := writeTemp(t, `# a test script
executor set nfa 192.0.2.10   # trailing comment

  cluster add 10.0.0.100 --configure
dlbctl port add '10.0.0.100@80' --staletimeout "600"
se a 10.0.0.100@80@10.1.1.5+10.1.1.6 --weight 5
server down 10.0.0.100@80@10.1.1.6
executor start --interface 'eth 0'
`)
	r := dlbctl(serve(t, eng), "file", "load", path)
	if r.code != exitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if want := path + ": applied 6 operations\n"; r.stdout != want {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
	want := []api.Op{
		{Object: api.ObjectExecutor, Action: api.ActionSet, NFA: ptr("192.0.2.10")},
		{Object: api.ObjectCluster, Action: api.ActionAdd, Target: "10.0.0.100", Configure: ptr(true)},
		{Object: api.ObjectPort, Action: api.ActionAdd, Target: "10.0.0.100@80", StaleTimeout: ptr[int64](600)},
		{Object: api.ObjectServer, Action: api.ActionAdd, Target: "10.0.0.100@80@10.1.1.5+10.1.1.6", Weight: ptr[int64](5)},
		{Object: api.ObjectServer, Action: api.ActionDown, Target: "10.0.0.100@80@10.1.1.6"},
		{Object: api.ObjectExecutor, Action: api.ActionStart, Interface: ptr("eth 0")},
	}
	got := eng.sent()
	if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Errorf("sent %d batches: %v\nwant one: %s", len(got), got, opJSON(want...))
	}
}

func TestFileLoadBadLine(t *testing.T) {
	tests := []struct {
		line string
		want string
	}{
		{"server add 10.0.0.1@80@10.1.1.5 --weight abc", `"--weight"`},
		{"server report", `"server report" cannot be used in a script`},
		{"executor report", "cannot be used in a script"},
		{"se rep", `"server report" cannot be used in a script`},
		{"file save x", `"file save" cannot be used in a script`},
		{"file load x", "cannot be used in a script"},
		{"version", `"version" cannot be used in a script`},
		{"completion bash", `"completion bash" cannot be used in a script`},
		{"help", `"help" cannot be used in a script`},
		{"bogus 1", `unknown command "bogus"`},
		{"server bogus 1", `unknown command "bogus" for "dlbctl server"`},
		{"server", `"server" is not a complete command`},
		{"server add 10.0.0.1@80@10.1.1.5 --help", "is not a complete command"},
		{"server add 10.0.0.1@80@10.1.1.5 --socket /tmp/x", "unknown flag: --socket"},
		{"server report -o json", "cannot be used in a script"},
		{"cluster add 10.0.0.1 'unterminated", "unterminated ' quote"},
		{`cluster add "10.0.0.1`, `unterminated " quote`},
		{`cluster add 10.0.0.1 \`, "backslash at the end"},
		{"executor set bogus 1", `unknown executor keyword "bogus"`},
		{"cluster set 10.0.0.1", `at least one of the flags in the group [configure proportions primaryhost announce community med] is required`},
		{"server add", "server add needs a target"},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			eng := &fakeEngine{}
			// The bad line is line 4, after good lines that must not be
			// sent either.
			path := writeTemp(t, "cluster add 10.0.0.1\n# comment\nport add 10.0.0.1@80\n"+tt.line+"\nserver add 10.0.0.1@80@10.1.1.5\n")
			r := dlbctl(serve(t, eng), "file", "load", path)
			if r.code != exitUsage {
				t.Errorf("exit %d, want %d", r.code, exitUsage)
			}
			if prefix := "dlbctl: " + path + ":4: "; !strings.HasPrefix(r.stderr, prefix) || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("stderr %q, want %q...%q", r.stderr, prefix, tt.want)
			}
			if got := eng.sent(); len(got) != 0 {
				t.Errorf("sent %v, want nothing", got)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
		})
	}
}

func TestFileLoadRefused(t *testing.T) {
	script := "cluster add 10.0.0.1\n\n# the port\nport add 10.0.0.1@80\nserver add 10.0.0.1@80@10.1.1.5 --weight 500\n"
	tests := []struct {
		index int
		want  string
	}{
		{2, ":5: weight: 500 is outside 0..20 (10.0.0.1@80@10.1.1.5) (nothing was applied)\n"},
		{1, ":4: weight: 500 is outside 0..20 (10.0.0.1@80@10.1.1.5) (nothing was applied)\n"},
		// A refusal of the batch as a whole names no line.
		{-1, ": weight: 500 is outside 0..20 (10.0.0.1@80@10.1.1.5) (nothing was applied)\n"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.index), func(t *testing.T) {
			eng := &fakeEngine{refuse: &config.OpError{Index: tt.index,
				Err: lb.Errorf("weight", "10.0.0.1@80@10.1.1.5", "500 is outside 0..20")}}
			path := writeTemp(t, script)
			r := dlbctl(serve(t, eng), "file", "load", path)
			if r.code != exitFailed {
				t.Errorf("exit %d, want %d", r.code, exitFailed)
			}
			if want := "dlbctl: " + path + tt.want; r.stderr != want {
				t.Errorf("stderr %q, want %q", r.stderr, want)
			}
			if got := eng.sent(); len(got) != 1 || len(got[0]) != 3 {
				t.Errorf("sent %v, want one batch of 3", got)
			}
		})
	}
}

// TestFileLoadConfigurationFile: a configuration file given to "file
// load" (YAML or JSON) is refused as such, naming "apply -f", before dlbd
// is asked; a script whose lines only mention such words loads.
func TestFileLoadConfigurationFile(t *testing.T) {
	for _, c := range []struct {
		name, data string
		line       int
	}{
		{"YAML", "# dlb configuration\n\nexecutor:\n  started: true\n", 3},
		{"YAML, clusters first", "clusters:\n  - address: 198.18.0.100\n", 1},
		{"JSON", "{\"executor\": {\"started\": true}}\n", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			eng := &fakeEngine{}
			path := writeTemp(t, c.data)
			r := dlbctl(serve(t, eng), "file", "load", path)
			want := fmt.Sprintf("dlbctl: %s:%d: this is a configuration file (YAML or JSON), not a script of dlbctl commands: \"dlbctl apply -f %s\" applies it\n", path, c.line, path)
			if r.code != exitUsage || !strings.HasPrefix(r.stderr, want) {
				t.Errorf("exit %d, stderr %q, want %q", r.code, r.stderr, want)
			}
			if eng.requestCount() != 0 {
				t.Error("dlbd was asked")
			}
		})
	}
	eng := &fakeEngine{}
	if r := dlbctl(serve(t, eng), "file", "load", writeTemp(t, "# clusters: below\ncluster add 198.18.0.100\n")); r.code != exitOK {
		t.Errorf("a script: exit %d: %s", r.code, r.stderr)
	}
}

func TestFileLoadEmptyAndMissing(t *testing.T) {
	eng := &fakeEngine{}
	sock := serve(t, eng)
	path := writeTemp(t, "# nothing\n\n")
	r := dlbctl(sock, "file", "load", path)
	if r.code != exitOK || r.stdout != path+": nothing to apply\n" || len(eng.sent()) != 0 {
		t.Errorf("exit %d, stdout %q, sent %v", r.code, r.stdout, eng.sent())
	}
	r = dlbctl(sock, "file", "load", filepath.Join(t.TempDir(), "missing.cfg"))
	if r.code != exitFailed || !strings.Contains(r.stderr, "reading script") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestSplitWords(t *testing.T) {
	tests := []struct {
		line string
		want []string
		err  bool
	}{
		{"", nil, false},
		{"   # only a comment", nil, false},
		{"a b\tc", []string{"a", "b", "c"}, false},
		{"a 'b c' d", []string{"a", "b c", "d"}, false},
		{`a "b \"c\" \\ \n"`, []string{"a", `b "c" \ \n`}, false},
		{`a'b'"c"d`, []string{"abcd"}, false},
		{`a '' b`, []string{"a", "", "b"}, false},
		{`a b#c # comment`, []string{"a", "b#c"}, false},
		{`a \# b\ c`, []string{"a", "#", "b c"}, false},
		{"a b\r", []string{"a", "b"}, false},
		{"a 'b", nil, true},
		{`a "b`, nil, true},
		{`a \`, nil, true},
	}
	for _, tt := range tests {
		got, err := splitWords(tt.line)
		if (err != nil) != tt.err || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("splitWords(%q) = %q, %v; want %q, error %v", tt.line, got, err, tt.want, tt.err)
		}
	}
	// quote's output splits back into the word.
	for _, w := range []string{"plain", "", "a b", "it's", `"x"`, `back\slash`, "#hash", "10.0.0.1@80"} {
		got, err := splitWords("cmd " + quote(w))
		if err != nil || len(got) != 2 || got[1] != w {
			t.Errorf("quote(%q) = %s splits into %q, %v", w, quote(w), got, err)
		}
	}
}

// The round trip runs the real engine behind a fake kernel: what file
// save writes from one dlbd, file load recreates in a fresh one.

type fakeDatapath struct {
	attached bool
	ifindex  int
}

func (d *fakeDatapath) Attach(ifindex int, mode lb.XDPMode) (lb.XDPMode, error) {
	d.attached, d.ifindex = true, ifindex
	if mode == lb.XDPAuto {
		return lb.XDPGeneric, nil
	}
	return mode, nil
}

func (d *fakeDatapath) Attached() (lb.Attachment, bool) {
	return lb.Attachment{Ifindex: d.ifindex, LinkID: 7, ProgramID: 9}, d.attached
}
func (d *fakeDatapath) Apply(lb.Dataplane) error        { return nil }
func (d *fakeDatapath) Update(lb.DataplaneUpdate) error { return nil }
func (d *fakeDatapath) Info() lb.DataplaneInfo {
	return lb.DataplaneInfo{PinDir: "/sys/fs/bpf/dlb-test", ConnTable: 1024, NATTable: 1024, HalfOpenTable: 1024,
		AffinityTable: 1024, MaxServices: 4096, MaxBackends: 16384, MaxTableSize: 65537}
}
func (d *fakeDatapath) Memory() []lb.TableMemory           { return nil }
func (d *fakeDatapath) Stats() (lb.DataplaneStats, error)  { return lb.DataplaneStats{}, nil }
func (d *fakeDatapath) Reasons() ([]lb.ReasonCount, error) { return nil, nil }
func (d *fakeDatapath) Sweep() (lb.SweepResult, error)     { return lb.SweepResult{}, nil }
func (d *fakeDatapath) DropAffinity(uint32) (int, error)   { return 0, nil }
func (d *fakeDatapath) Close() error                       { return nil }
func (d *fakeDatapath) RemovePins() ([]string, error) {
	d.attached = false
	return []string{"link", "prog"}, nil
}
func (d *fakeDatapath) Dropped() []string { return nil }

// fakeNetif has one interface, eth0, and reaches every server on it with
// a MAC made of the server's address.
type fakeNetif struct{}

var ifMAC = net.HardwareAddr{2, 0, 0, 0, 0, 0xee}

func (fakeNetif) LinkByName(name string) (lb.Link, error) {
	if name != "eth0" {
		return lb.Link{}, fmt.Errorf("no interface %q", name)
	}
	return lb.Link{Index: 2, Name: name, MAC: ifMAC}, nil
}
func (n fakeNetif) LinkByIndex(index int) (lb.Link, error) {
	if index != 2 {
		return lb.Link{}, fmt.Errorf("no interface %d", index)
	}
	return n.LinkByName("eth0")
}

func (fakeNetif) Neighbors(addrs []netip.Addr) (map[netip.Addr]lb.Neighbor, map[netip.Addr]error) {
	out := map[netip.Addr]lb.Neighbor{}
	for _, a := range addrs {
		out[a] = lb.Neighbor{Ifindex: 2, IfMAC: ifMAC, MAC: net.HardwareAddr{2, 0, 0, 0, 0, a.As16()[15]}}
	}
	return out, nil
}

func (n fakeNetif) Routes(addrs []netip.Addr) (map[netip.Addr]lb.Neighbor, map[netip.Addr]error) {
	out, errs := n.Neighbors(addrs)
	for a, nb := range out {
		nb.MAC = nil
		out[a] = nb
	}
	return out, errs
}

func (fakeNetif) AddAddresses(_ string, addrs []netip.Addr) (map[netip.Addr]bool, error) {
	on := map[netip.Addr]bool{}
	for _, a := range addrs {
		on[a] = true
	}
	return on, nil
}
func (fakeNetif) DeprecateAddresses(string, []netip.Addr) ([]netip.Addr, error) { return nil, nil }
func (fakeNetif) DelAddress(string, netip.Addr) error                           { return nil }
func (fakeNetif) Watch(context.Context) (<-chan lb.NetEvent, error) {
	return nil, errors.New("no watch in this fake")
}
func (fakeNetif) Reprobe(int, []netip.Addr, time.Duration) error              { return nil }
func (fakeNetif) ForgetNeighbors([]netip.Addr) error                          { return nil }
func (fakeNetif) NeighborsAt([]lb.NATHop) (map[lb.NATHop][]netip.Addr, error) { return nil, nil }
func (fakeNetif) ReprobeUnmanaged(int, []netip.Addr, time.Duration) error     { return nil }
func (fakeNetif) Forwarding(string, bool) (bool, error)                       { return true, nil }
func (fakeNetif) GRO(int) (string, bool, error)                               { return "eth0", false, nil }
func (fakeNetif) HeldAddresses(addrs []netip.Addr) (map[netip.Addr]bool, error) {
	held := map[netip.Addr]bool{}
	for _, a := range addrs {
		held[a] = true
	}
	return held, nil
}

// realDaemon runs dispatcher's engine over the fakes and serves it.
func realDaemon(t *testing.T) string {
	t.Helper()
	eng, err := dispatcher.New(dispatcher.Options{
		StateDir:     t.TempDir(),
		OpenDatapath: func() (dispatcher.Datapath, error) { return &fakeDatapath{}, nil },
		Netif:        fakeNetif{},
		Logger:       slog.New(slog.DiscardHandler),
		MaxServices:  4096,
		MaxBackends:  16384,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { eng.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		// Bounded, so that an engine stuck in a change fails this test
		// instead of hanging the whole run.
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the engine did not stop")
		}
	})
	return serve(t, server.Handler(eng, slog.New(slog.DiscardHandler)))
}

func TestFileRoundTrip(t *testing.T) {
	a := realDaemon(t)
	for _, cmd := range []string{
		"executor set nfa 192.0.2.10 fintimeout 30",
		"cluster add 10.0.0.100+10.0.0.101",
		"cluster set 10.0.0.101 --configure=true",
		"port add @80 --weightbound 50",
		"port add 10.0.0.100@53 --protocol both --staletimeout 30 --tablesize 211",
		"server add @80@10.1.1.5+10.1.1.6 --weight 7",
		"server add 10.0.0.100@53@10.1.1.9",
		"server down 10.0.0.101@80@10.1.1.6",
		"server set 10.0.0.100@80@10.1.1.6 --weight 0",
		"executor set nfa 2001:2::2",
		"executor set clientgateway 10.0.0.1",
		"port add 10.0.0.100@443 --method nat --stickytime 60 --stickymask 24 --selectionalgorithm conn+affin --maxhalfopen 500",
		"port add 10.0.0.100@8443 --stickytime 60 --crossport 443",
		"server add 10.0.0.100@443@10.2.0.5 --returnaddress 10.0.0.3 --router 10.0.0.254 --mapport 8443",
		"server add 10.0.0.100@443@10.0.0.7 --returnaddress 10.0.0.3",
		"cluster add 2001:2::100",
		"port add 2001:2::100@80 --stickytime 30 --stickymask 64 --protocol udp",
		"server add 2001:2::100@80@2001:2::21",
		"cluster set 10.0.0.100 --announce yes --community 65000:100 --community 1:2:3 --med 5",
		"executor start --interface eth0 --xdp-mode native",
	} {
		if r := dlbctl(a, strings.Fields(cmd)...); r.code != exitOK {
			t.Fatalf("%s: exit %d: %s", cmd, r.code, r.stderr)
		}
	}
	// dlbd checks ranges: a weight above the port's weightbound.
	r := dlbctl(a, "server", "set", "10.0.0.100@53@10.1.1.9", "--weight", "500")
	if want := "dlbctl: weight: 500 is outside 0..20 (10.0.0.100@53@10.1.1.9)\n"; r.code != exitFailed || r.stderr != want {
		t.Errorf("exit %d, stderr %q, want 1, %q", r.code, r.stderr, want)
	}

	path := filepath.Join(t.TempDir(), "dlb.cfg")
	if r := dlbctl(a, "file", "save", path); r.code != exitOK {
		t.Fatalf("save: exit %d: %s", r.code, r.stderr)
	}
	b := realDaemon(t)
	if r := dlbctl(b, "file", "load", path); r.code != exitOK {
		data, _ := os.ReadFile(path)
		t.Fatalf("load: exit %d: %s\n%s", r.code, r.stderr, data)
	}
	for _, args := range [][]string{{"cluster", "report"}, {"port", "report"}, {"server", "report"}} {
		ra, rb := dlbctl(a, append(args, "-o", "json")...), dlbctl(b, append(args, "-o", "json")...)
		if ra.stdout != rb.stdout || ra.code != exitOK {
			t.Errorf("%s differs after the round trip:\n%s\nvs\n%s", args, ra.stdout, rb.stdout)
		}
	}
	exA, exB := executorConfig(t, a), executorConfig(t, b)
	if exA != exB || !exA.Started || exA.NFA6 != "2001:2::2" || exA.ClientGateway != "10.0.0.1" {
		t.Errorf("executor %+v, want %+v", exB, exA)
	}

	// Loading the script again conflicts with what it created: the
	// refusal names the line of the first operation dlbd refused, and
	// the whole batch is left out.
	data, _ := os.ReadFile(path)
	line := 0
	for i, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "cluster add 10.0.0.100") {
			line = i + 1
			break
		}
	}
	r = dlbctl(a, "file", "load", path)
	want := fmt.Sprintf("dlbctl: %s:%d: cluster: already exists (10.0.0.100) (nothing was applied)\n", path, line)
	if r.code != exitFailed || r.stderr != want {
		t.Errorf("exit %d, stderr %q, want %q", r.code, r.stderr, want)
	}
}

// executorConfig is the part of the executor report that a script sets.
type execConfig struct {
	Started                       bool
	Interface, Mode               string
	NFA, NFA6                     string
	ClientGateway, ClientGateway6 string
	FinTimeout                    uint32
}

func executorConfig(t *testing.T, sock string) execConfig {
	t.Helper()
	r := dlbctl(sock, "executor", "report", "-o", "json")
	var ex api.ExecutorReport
	if err := json.Unmarshal([]byte(r.stdout), &ex); err != nil {
		t.Fatalf("exit %d: %v: %s", r.code, err, r.stderr)
	}
	return execConfig{ex.Started, ex.Interface, ex.XDPMode, ex.NFA, ex.NFA6, ex.ClientGateway, ex.ClientGateway6, ex.FinTimeout}
}

// TestResultNotes: what dlbd says about an accepted change is printed: as
// text in a table, as the result with -o json; nothing when it says
// nothing.
func TestResultNotes(t *testing.T) {
	a := realDaemon(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"executor", "start", "--interface", "eth0"}, ""},
		{[]string{"executor", "stop"}, "removed 2 pins under /sys/fs/bpf/dlb-test: link, prog\n"},
		{[]string{"executor", "start", "--interface", "eth0"}, ""},
		{[]string{"-o", "json", "executor", "stop"}, "{\n  \"applied\": 1,\n  \"notes\": [\n    \"removed 2 pins under /sys/fs/bpf/dlb-test: link, prog\"\n  ]\n}\n"},
		{[]string{"-o", "json", "cluster", "add", "10.0.0.100"}, ""},
	} {
		r := dlbctl(a, c.args...)
		if r.code != exitOK || r.stdout != c.want {
			t.Errorf("%v: exit %d, stdout %q, want %q (stderr %q)", c.args, r.code, r.stdout, c.want, r.stderr)
		}
	}
}

// TestFileLoadBGP: the lines file save writes for the BGP speaker load as
// the operations they stand for.
func TestFileLoadBGP(t *testing.T) {
	eng := &fakeEngine{}
	path := filepath.Join(t.TempDir(), "bgp.cfg")
	script := "bgp set --asn 65001 --routerid 198.18.0.2 --listen-port 1179\n" +
		"bgp neighbor add 198.18.0.1 --remote-as 65000 --holdtime 9 --multihop 2 --port 1179 --password-file '/etc/dlb/my pw'\n" +
		"cluster add 198.18.0.100 --announce yes --community 65000:100 --med 5\n"
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := dlbctl(serve(t, eng), "file", "load", path); r.code != exitOK {
		t.Fatalf("file load: exit %d: %s", r.code, r.stderr)
	}
	want := []api.Op{
		{Object: api.ObjectBGP, Action: api.ActionSet, ASN: ptr[int64](65001), RouterID: ptr("198.18.0.2"), ListenPort: ptr[int64](1179)},
		{Object: api.ObjectNeighbor, Action: api.ActionAdd, Target: "198.18.0.1", RemoteAS: ptr[int64](65000), HoldTime: ptr[int64](9),
			Multihop: ptr[int64](2), NeighborPort: ptr[int64](1179), PasswordFile: ptr("/etc/dlb/my pw")},
		{Object: api.ObjectCluster, Action: api.ActionAdd, Target: "198.18.0.100", Announce: ptr(true),
			Communities: []string{"65000:100"}, MED: ptr[int64](5)},
	}
	if got := eng.sent(); len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Errorf("sent %v\nwant [%s]", got, opJSON(want...))
	}
}

// TestFileLoadSameAsCommands: a script's lines, each parsed with only the
// command it names, send the operations the same commands send from the
// command line (aliases and abbreviations included).
func TestFileLoadSameAsCommands(t *testing.T) {
	lines := [][]string{
		{"executor", "set", "nfa", "198.18.0.2"},
		{"cluster", "add", "198.18.0.100", "--configure", "--primaryhost", "198.18.0.2"},
		{"port", "add", "198.18.0.100@80", "--method", "nat"},
		{"server", "add", "198.18.0.100@80@198.18.1.11", "--mapport", "8080", "--returnaddress", "198.18.0.3", "--router", "198.18.0.254"},
		{"se", "set", "198.18.0.100@80@198.18.1.11", "--weight", "7"},
		{"manager", "start"},
		{"advisor", "start", "http", "198.18.0.100@80"},
		{"highavailability", "backup", "add", "primary", "auto", "12345"},
		{"ha", "heartbeat", "add", "198.18.0.2", "198.18.0.4", "--secret-file", "/etc/dlb/ha.secret"},
		{"ha", "reach", "add", "198.18.0.254"},
		{"bgp", "set", "--asn", "64512", "--routerid", "198.18.0.2"},
	}
	byCommand := &fakeEngine{}
	sock := serve(t, byCommand)
	var script strings.Builder
	for _, l := range lines {
		if r := dlbctl(sock, l...); r.code != exitOK {
			t.Fatalf("dlbctl %v: exit %d: %s", l, r.code, r.stderr)
		}
		script.WriteString(strings.Join(l, " ") + "\n")
	}
	var want []api.Op
	for _, b := range byCommand.sent() {
		want = append(want, b...)
	}
	byScript := &fakeEngine{}
	if r := dlbctl(serve(t, byScript), "file", "load", writeTemp(t, script.String())); r.code != exitOK {
		t.Fatalf("file load: exit %d: %s", r.code, r.stderr)
	}
	if got := byScript.sent(); len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Errorf("the script sent %v\nthe commands %s", got, opJSON(want...))
	}
}
