package testutil

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// SmallFS mounts a tmpfs of size bytes on dir (created if missing) for
// the test, and unmounts it (lazily: a process may still hold files) at
// its end.
func SmallFS(t *testing.T, dir string, size int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=0700,size="+strconv.Itoa(size)); err != nil {
		t.Fatalf("mounting a %d-byte tmpfs on %s: %v", size, dir, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
}

// FillFS leaves no block free on the file system of dir: it takes back the
// blocks its files hold beyond their ends (reserved with fallocate, as
// dlbd's journal does), then writes a file until the file system is
// full. It returns that file: removing it makes room again.
func FillFS(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, e.Name()), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := f.Stat()
		if err == nil {
			end := (fi.Size() + 4095) / 4096 * 4096
			err = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, end, 1<<30)
		}
		_ = f.Close()
		if err != nil {
			t.Fatalf("taking back the blocks %s holds beyond its end: %v", e.Name(), err)
		}
	}
	fill := filepath.Join(dir, "fill")
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fill, make([]byte, (st.Blocks+1)*uint64(st.Bsize)), 0o600); err == nil {
		t.Fatalf("%s: the whole file system written into one file without filling it", fill)
	}
	return fill
}
