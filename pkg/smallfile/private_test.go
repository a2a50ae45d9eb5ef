package smallfile

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// aclEntry is one entry of a POSIX ACL as its extended attribute holds it.
type aclEntry struct {
	tag, perm uint16
	id        uint32
}

// setACL gives path the access ACL entries (in the kernel's order: owner,
// users, group, groups, mask, other), as setfacl does.
func setACL(t *testing.T, path string, entries ...aclEntry) {
	t.Helper()
	b := binary.LittleEndian.AppendUint32(nil, aclVersion)
	for _, e := range entries {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	if err := unix.Setxattr(path, aclXattr, b, 0); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			t.Skipf("%s: no POSIX ACLs here", path)
		}
		t.Fatalf("setting the ACL of %s: %v", path, err)
	}
}

func TestPrivate(t *testing.T) {
	const (
		userObj = 0x01
		r, rw   = 4, 6
		undef   = 0xffffffff
	)
	me := uint32(os.Geteuid())
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		mode os.FileMode
		acl  []aclEntry
		want string // in the error; empty: private
	}{
		{"0600", 0o600, nil, ""},
		{"0400", 0o400, nil, ""},
		{"0640", 0o640, nil, "has mode 0640; run: chmod 600"},
		{"0604", 0o604, nil, "has mode 0604"},
		// systemd's LoadCredential= on a file system with ACLs: the owner
		// reads, and the service's user by an entry of its own; the mode
		// reads 0440 (the mask in the group bits).
		{"a credential", 0o400, []aclEntry{{userObj, r, undef}, {aclUser, r, me}, {aclGroupO, 0, undef},
			{aclMask, r, undef}, {aclOther, 0, undef}}, ""},
		{"another user named", 0o400, []aclEntry{{userObj, r, undef}, {aclUser, r, me + 4242}, {aclGroupO, 0, undef},
			{aclMask, r, undef}, {aclOther, 0, undef}}, "lets user"},
		{"a group named", 0o400, []aclEntry{{userObj, r, undef}, {aclGroupO, 0, undef}, {aclGroup, rw, 4243},
			{aclMask, rw, undef}, {aclOther, 0, undef}}, "lets group 4243 read or write it; run: setfacl -b"},
		{"the group, masked out", 0o400, []aclEntry{{userObj, rw, undef}, {aclGroupO, r, undef}, {aclGroup, r, 4243},
			{aclMask, 0, undef}, {aclOther, 0, undef}}, ""},
		{"others", 0o400, []aclEntry{{userObj, rw, undef}, {aclUser, r, me}, {aclGroupO, 0, undef},
			{aclMask, r, undef}, {aclOther, r, undef}}, "lets others"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			if err := os.WriteFile(path, []byte("secret\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tc.mode); err != nil {
				t.Fatal(err)
			}
			if tc.acl != nil {
				setACL(t, path, tc.acl...)
			}
			f, fi, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if tc.name == "a credential" && fi.Mode().Perm() != 0o440 {
				t.Fatalf("mode %v with the ACL, want 0440 (the mask): the test shows nothing", fi.Mode())
			}
			err = Private(f, fi)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("mode %v: %v, want private", fi.Mode(), err)
			case tc.want != "" && (!errors.Is(err, ErrNotPrivate) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("mode %v: %v, want ErrNotPrivate with %q", fi.Mode(), err, tc.want)
			}
		})
	}
}
