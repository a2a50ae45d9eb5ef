package smallfile

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// Every kind of file an operator may name by mistake is refused at once,
// with what it is; none blocks (a named pipe without a writer) or runs
// for ever (/dev/zero).
func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string { return testutil.WriteFile(t, dir, name, content) }
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(write("target", "via a link"), link); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tc := range []struct {
		name, path string
		max        int64
		want       string // content, or the error's words after "ERR "
	}{
		{"regular", write("ok", "secret\n"), 64, "secret\n"},
		{"empty", write("empty", ""), 64, ""},
		{"exactly max", write("max", "12345678"), 8, "12345678"},
		{"one byte over", write("over", "123456789"), 8, "ERR larger than 8 bytes"},
		{"over, in KiB", write("kib", strings.Repeat("a", 5000)), 4096, "ERR larger than 4 KiB"},
		{"symbolic link to a file", link, 64, "via a link"},
		{"missing", filepath.Join(dir, "nope"), 64, "ERR no such file"},
		{"directory", dir, 64, "ERR is a directory, not a regular file"},
		{"named pipe without a writer", fifo, 64, "ERR is a named pipe, not a regular file"},
		{"socket", sock, 64, "ERR no such device or address"},
		{"endless device", "/dev/zero", 64, "ERR is a character device, not a regular file"},
	} {
		start := time.Now()
		got, err := Read(tc.path, tc.max)
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s: took %v", tc.name, took)
		}
		if w, ok := strings.CutPrefix(tc.want, "ERR "); ok {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q, %v; want an error with %q", tc.name, got, err, w)
			}
			continue
		}
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}

// ReadPrivate reads what Read reads, and only from a private file.
func TestReadPrivate(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		return testutil.WriteFileMode(t, dir, name, content, mode)
	}
	for _, tc := range []struct {
		name, path string
		want       string // content, or the error's words after "ERR "
		notPrivate bool   // the error wraps ErrNotPrivate
	}{
		{"0600", write("a", "secret\n", 0o600), "secret\n", false},
		{"0400", write("b", "secret\n", 0o400), "secret\n", false},
		{"0644", write("c", "secret\n", 0o644), "ERR has mode 0644", true},
		{"too large", write("d", strings.Repeat("s", 65), 0o600), "ERR larger than 64 bytes", false},
		{"too large and not private", write("e", strings.Repeat("s", 65), 0o640), "ERR has mode 0640", true},
		{"missing", filepath.Join(dir, "nope"), "ERR no such file", false},
		{"endless device", "/dev/zero", "ERR is a character device, not a regular file", false},
	} {
		got, err := ReadPrivate(tc.path, 64)
		if w, ok := strings.CutPrefix(tc.want, "ERR "); ok {
			if err == nil || !strings.Contains(err.Error(), w) || errors.Is(err, ErrNotPrivate) != tc.notPrivate {
				t.Errorf("%s: %q, %v; want an error with %q (not private: %v)", tc.name, got, err, w, tc.notPrivate)
			}
			continue
		}
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}
