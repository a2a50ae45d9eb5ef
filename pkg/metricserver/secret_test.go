package metricserver

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dlbproject/dlb/pkg/testutil"
)

func TestLoadSecret(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name, content string, mode os.FileMode) string {
		return testutil.WriteFileMode(t, dir, name, content, mode)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		path    string
		want    string
		wantErr string
	}{
		{"0600 with newline", file("ok", "  c2VjcmV0LXNlY3JldC1zZWNyZXQ=\n", 0o600), "c2VjcmV0LXNlY3JldC1zZWNyZXQ=", ""},
		{"0400", file("ro", "0123456789abcdef", 0o400), "0123456789abcdef", ""},
		{"group-readable", file("g", "0123456789abcdef", 0o640), "", "chmod 600"},
		{"world-readable", file("w", "0123456789abcdef", 0o644), "", "mode 0644"},
		{"group-writable", file("gw", "0123456789abcdef", 0o620), "", "chmod 600"},
		{"empty", file("empty", "\n\n", 0o600), "", "is empty"},
		{"short", file("short", "abc\n", 0o600), "", "shorter than 16"},
		{"too large", file("large", strings.Repeat("a", 5000), 0o600), "", "larger than"},
		{"missing", filepath.Join(dir, "nope"), "", "no such file"},
		{"directory", dir, "", "not a regular file"},
		{"named pipe", fifo, "", "is a named pipe, not a regular file"},
		{"endless device", "/dev/zero", "", "not a regular file"},
		{"no path", "", "", "no secret file"},
	} {
		got, err := LoadSecret(tc.path)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: %q, %v; want error with %q", tc.name, got, err, tc.wantErr)
			}
		case err != nil || string(got) != tc.want:
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
	if _, err := LoadSecret(filepath.Join(dir, "g")); !errors.Is(err, ErrSecretPermissions) {
		t.Errorf("group-readable: %v does not wrap ErrSecretPermissions", err)
	}
}
