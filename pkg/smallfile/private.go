package smallfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// ErrNotPrivate is wrapped by Private's error: users other than the
// file's owner and this process's may read or write the file.
var ErrNotPrivate = errors.New("accessible by group or others")

// Private returns nil when no one but the file's owner and this
// process's user may read or write the open file f (fi its description):
// a mode of 0600 or 0400, or a POSIX ACL that names no one else. With an
// ACL the mode's group bits are the ACL's mask, not the group's
// permissions: systemd's LoadCredential= file, 0400 and made readable to
// the service's user by an ACL entry, shows mode 0440 while no group may
// read it. The error wraps ErrNotPrivate and names the command that
// fixes it.
func Private(f *os.File, fi fs.FileInfo) error {
	perm := fi.Mode().Perm()
	if perm&0o077 == 0 {
		return nil
	}
	others, err := aclOthers(f)
	switch {
	case err != nil:
		return fmt.Errorf("%s: reading its ACL: %w", f.Name(), err)
	case others == nil: // no ACL: the mode says it all
		return fmt.Errorf("%w: %s has mode %04o; run: chmod 600 %s", ErrNotPrivate, f.Name(), perm, f.Name())
	case len(others) > 0:
		return fmt.Errorf("%w: the ACL of %s lets %s read or write it; run: setfacl -b %s && chmod 600 %s",
			ErrNotPrivate, f.Name(), strings.Join(others, ", "), f.Name(), f.Name())
	}
	return nil
}
