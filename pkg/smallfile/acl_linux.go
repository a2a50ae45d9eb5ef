package smallfile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// The parts of a POSIX ACL in its extended attribute (linux/posix_acl_xattr.h).
const (
	aclXattr   = "system.posix_acl_access"
	aclVersion = 2
	aclUser    = 0x02
	aclGroupO  = 0x04
	aclGroup   = 0x08
	aclMask    = 0x10
	aclOther   = 0x20
	aclRW      = 0x6 // read and write; execute does not matter here
)

// aclOthers returns who besides the file's owner and this process's user
// may read or write f by its access ACL: nil when f has no ACL, an empty
// slice when no one.
func aclOthers(f *os.File) ([]string, error) {
	buf := make([]byte, 4+32*8)
	var n int
	for {
		var err error
		n, err = unix.Fgetxattr(int(f.Fd()), aclXattr, buf)
		if errors.Is(err, unix.ERANGE) && len(buf) < 1<<16 {
			buf = make([]byte, 2*len(buf))
			continue
		}
		if errors.Is(err, unix.ENODATA) || errors.Is(err, unix.EOPNOTSUPP) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		break
	}
	b := buf[:n]
	if len(b) < 4 || (len(b)-4)%8 != 0 || binary.LittleEndian.Uint32(b) != aclVersion {
		return nil, fmt.Errorf("an ACL of %d bytes this does not read", len(b))
	}
	type entry struct {
		tag, perm uint16
		id        uint32
	}
	var entries []entry
	mask := uint16(0x7)
	for e := b[4:]; len(e) > 0; e = e[8:] {
		x := entry{binary.LittleEndian.Uint16(e), binary.LittleEndian.Uint16(e[2:]), binary.LittleEndian.Uint32(e[4:])}
		if x.tag == aclMask {
			mask = x.perm
		}
		entries = append(entries, x)
	}
	me := uint32(os.Geteuid())
	others := []string{}
	for _, x := range entries {
		switch {
		case x.tag == aclOther && x.perm&aclRW != 0:
			others = append(others, "others")
		case x.tag == aclGroupO && x.perm&mask&aclRW != 0:
			others = append(others, "its group")
		case x.tag == aclGroup && x.perm&mask&aclRW != 0:
			others = append(others, fmt.Sprintf("group %d", x.id))
		case x.tag == aclUser && x.id != me && x.perm&mask&aclRW != 0:
			others = append(others, fmt.Sprintf("user %d", x.id))
		}
	}
	return others, nil
}
