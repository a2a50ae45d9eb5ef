//go:build linux

package lock

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// A second lock on the same path is refused and names the holder (this
// process: flock locks belong to open files, so two opens in one process
// conflict like two processes do), and is granted once the first is
// released.
func TestLockConflicts(t *testing.T) {
	for _, tt := range []struct {
		name string
		take func(dir string) (*Lock, error)
		path func(dir string) string
	}{
		{"file", func(dir string) (*Lock, error) { return File(filepath.Join(dir, "x.lock")) },
			func(dir string) string { return filepath.Join(dir, "x.lock") }},
		{"dir", Dir, func(dir string) string { return dir }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			testConflict(t, func() (*Lock, error) { return tt.take(dir) }, tt.path(dir))
		})
	}
}

func testConflict(t *testing.T, take func() (*Lock, error), path string) {
	t.Helper()
	l1, err := take()
	if err != nil {
		t.Fatalf("first lock: %v", err)
	}
	if !l1.StillHeld() {
		t.Error("StillHeld is false for a fresh lock")
	}
	_, err = take()
	var he *HeldError
	if !errors.As(err, &he) {
		t.Fatalf("second lock: %v, want a HeldError", err)
	}
	if he.PID != os.Getpid() || he.Path != path {
		t.Errorf("held by pid %d at %s, want pid %d at %s", he.PID, he.Path, os.Getpid(), path)
	}
	if want := fmt.Sprintf("(pid %d)", os.Getpid()); !strings.Contains(err.Error(), want) {
		t.Errorf("message %q does not name the holder %s", err, want)
	}
	if err := l1.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l1.Release(); err != nil {
		t.Errorf("second Release: %v", err)
	}
	l2, err := take()
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	if err := l2.Release(); err != nil {
		t.Fatal(err)
	}
}

// The lock file carries the holder's PID for people reading it.
func TestFileWritesPID(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dlbd.lock")
	if err := os.WriteFile(path, []byte("999999999 stale text from before\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := File(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Release() }()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), strconv.Itoa(os.Getpid())+"\n"; got != want {
		t.Errorf("lock file holds %q, want %q", got, want)
	}
}

// A directory removed and recreated under the holder is no longer
// protected: StillHeld says so.
func TestStillHeld(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pins")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := Dir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Release() }()
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if l.StillHeld() {
		t.Error("StillHeld after the directory was removed")
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if l.StillHeld() {
		t.Error("StillHeld after the directory was recreated")
	}
}

// A lock file removed under its holder (with its directory, or alone) is
// taken again by Renew, which says so when another process got the path
// first; a locked directory once it exists again.
func TestRenew(t *testing.T) {
	for _, c := range []struct {
		name   string
		remove func(dir, path string) error
		taken  bool // another lock takes the path before Renew
	}{
		{name: "nothing removed", remove: func(string, string) error { return nil }},
		{name: "file removed", remove: func(_, path string) error { return os.Remove(path) }},
		{name: "directory removed", remove: func(dir, _ string) error { return os.RemoveAll(dir) }},
		{name: "directory removed, path taken meanwhile", remove: func(dir, _ string) error { return os.RemoveAll(dir) }, taken: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "dlbd.lock")
			l, err := File(path)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = l.Release() }()
			if err := c.remove(dir, path); err != nil {
				t.Fatal(err)
			}
			if c.taken {
				if err := os.Mkdir(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				other, err := File(path)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = other.Release() }()
				var he *HeldError
				if err := l.Renew(); !errors.As(err, &he) {
					t.Fatalf("Renew with the path taken: %v, want a HeldError", err)
				}
				if l.StillHeld() {
					t.Error("StillHeld though another lock holds the path")
				}
				return
			}
			if err := l.Renew(); err != nil {
				t.Fatalf("Renew: %v", err)
			}
			if !l.StillHeld() {
				t.Error("not StillHeld after Renew")
			}
			if b, err := os.ReadFile(path); err != nil || string(b) != strconv.Itoa(os.Getpid())+"\n" {
				t.Errorf("lock file after Renew: %q, %v", b, err)
			}
			var he *HeldError
			if _, err := File(path); !errors.As(err, &he) {
				t.Errorf("a second lock after Renew: %v, want a HeldError", err)
			}
		})
	}
	// A locked directory removed: not renewed until it exists again.
	dir := filepath.Join(t.TempDir(), "pins")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	d, err := Dir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Release() }()
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := d.Renew(); err == nil {
		t.Error("a directory lock was renewed with no directory")
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := d.Renew(); err != nil || !d.StillHeld() {
		t.Errorf("Renew of the directory created again: %v (held: %v)", err, d.StillHeld())
	}
	var he *HeldError
	if _, err := Dir(dir); !errors.As(err, &he) {
		t.Errorf("a second lock on the directory after Renew: %v, want a HeldError", err)
	}
}

func TestLockErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Dir(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "opening directory to lock") {
		t.Errorf("Dir of a missing directory: %v", err)
	}
	if _, err := File(filepath.Join(dir, "missing", "x.lock")); err == nil || !strings.Contains(err.Error(), "opening lock file") {
		t.Errorf("File in a missing directory: %v", err)
	}
	f := filepath.Join(dir, "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Dir(f); err == nil {
		t.Error("Dir of a regular file succeeded")
	}
}

func TestHolderIn(t *testing.T) {
	const locks = `1: POSIX  ADVISORY  WRITE 77 00:2a:1234 0 EOF
2: FLOCK  ADVISORY  WRITE 4242 00:2a:1234 0 EOF
2: -> FLOCK  ADVISORY  WRITE 43 00:2a:1234 0 EOF
3: FLOCK  ADVISORY  WRITE 51 103:05:1234 0 EOF
4: OFDLCK ADVISORY  READ  -1 00:2a:99 0 EOF
`
	for _, tt := range []struct {
		major, minor uint32
		ino          uint64
		want         int
	}{
		{0, 0x2a, 1234, 4242}, // the POSIX lock and the waiter are not it
		{0x103, 5, 1234, 51},
		{0, 0x2a, 99, 0}, // not a flock
		{0, 0x2b, 1234, 0},
		{0, 0x2a, 12345, 0},
	} {
		got := holderIn(bufio.NewScanner(strings.NewReader(locks)), tt.major, tt.minor, tt.ino)
		if got != tt.want {
			t.Errorf("%x:%x:%d: pid %d, want %d", tt.major, tt.minor, tt.ino, got, tt.want)
		}
	}
}

// bpffs holds no regular files; a directory on it is locked as such.
func TestPrivilegedLockBPFFS(t *testing.T) {
	testutil.RequirePrivileged(t)
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("dlbh-lock-%d-%d", os.Getpid(), rand.Uint32()))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatalf("creating a directory on bpffs: %v", err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	if err := os.WriteFile(filepath.Join(dir, "x.lock"), nil, 0o644); err == nil {
		t.Error("bpffs took a regular file; the premise of Dir is wrong")
	}
	testConflict(t, func() (*Lock, error) { return Dir(dir) }, dir)
}
