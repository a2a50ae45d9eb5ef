package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/dlbproject/dlb/internal/logagg"
)

// DefaultSocketCheck is how often a Socket checks that its file is still
// there.
const DefaultSocketCheck = 250 * time.Millisecond

// Socket is the admin API's unix socket. It owns the socket file it
// created: when the file disappears under it (a tmpfiles cleaner, an
// operator's rm), Serve creates it again; and Close removes the file only
// if it is still the one this Socket created, never a file another dlbd
// put at the same path since.
type Socket struct {
	path  string
	mode  os.FileMode
	log   *slog.Logger
	check time.Duration

	mu      sync.Mutex
	ln      *net.UnixListener // the listener of the file at path
	id      fileID            // the file it created
	retired map[*net.UnixListener]bool
	foreign bool // the path holds a file of someone else's (logged once)
	// unmade is why the file cannot be created again, while it cannot
	// (Serve's goroutine only).
	unmade logagg.Steady
}

// fileID identifies a file across renames and re-creations.
type fileID struct{ dev, ino uint64 }

// SocketOptions configure OpenSocket.
type SocketOptions struct {
	// Mode is the socket file's mode (0660 when zero), set through the
	// umask while the file is created.
	Mode os.FileMode
	// Check is how often the file is checked (DefaultSocketCheck when
	// zero).
	Check time.Duration
	// Logger receives a line when the file is recreated or replaced
	// (discarded when nil).
	Logger *slog.Logger
}

// OpenSocket creates the unix socket at path, creating its directory. A
// stale socket left by a dead dlbd is replaced; a live one is an error. If
// a group named "dlb" exists, the socket is given to it, so that its
// members may use dlbctl without root.
func OpenSocket(path string, o SocketOptions) (*Socket, error) {
	s := &Socket{path: path, mode: o.Mode, log: o.Logger, check: o.Check, retired: map[*net.UnixListener]bool{}}
	if s.mode == 0 {
		s.mode = 0o660
	}
	if s.check <= 0 {
		s.check = DefaultSocketCheck
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if SocketLive(path) {
		return nil, fmt.Errorf("another dlbd is listening on %s", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing stale socket: %w", err)
	}
	ln, id, err := s.listen()
	if err != nil {
		return nil, err
	}
	s.ln, s.id = ln, id
	return s, nil
}

// SocketLive reports whether a process accepts connections on the unix
// socket at path (a live dlbd; a stale socket file refuses them).
func SocketLive(path string) bool {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// Path returns the socket's path.
func (s *Socket) Path() string { return s.path }

// Addr returns the listening address.
func (s *Socket) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ln.Addr()
}

// listen creates the socket file with the Socket's mode and group.
func (s *Socket) listen() (*net.UnixListener, fileID, error) {
	if err := os.MkdirAll(filepath.Dir(s.path), 0o755); err != nil {
		return nil, fileID{}, fmt.Errorf("creating socket directory: %w", err)
	}
	// The file is created with its mode: a client may connect (and the
	// file may be removed) as soon as it exists, so there is no chmod
	// after the fact.
	old := syscall.Umask(int(^s.mode & 0o777))
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: s.path, Net: "unix"})
	syscall.Umask(old)
	if err != nil {
		return nil, fileID{}, fmt.Errorf("listening on %s: %w", s.path, err)
	}
	// Closing must never unlink the path: by then it may name another
	// dlbd's socket. Close decides.
	l.SetUnlinkOnClose(false)
	id, err := statID(s.path)
	if err != nil {
		l.Close()
		return nil, fileID{}, fmt.Errorf("checking %s: %w", s.path, err)
	}
	if g, err := user.LookupGroup("dlb"); err == nil {
		if gid, err := strconv.Atoi(g.Gid); err == nil {
			_ = os.Lchown(s.path, -1, gid)
		}
	}
	return l, id, nil
}

func statID(path string) (fileID, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return fileID{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, fmt.Errorf("no file identity for %s", path)
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino}, nil
}

// Serve serves srv on the socket until srv is shut down (it then returns
// http.ErrServerClosed) or accepting fails. Every Check it makes sure the
// file is still there, and creates it again if it is gone; the listener
// of the old file is closed (its established connections are served to
// the end).
func (s *Socket) Serve(srv *http.Server) error {
	type result struct {
		ln  *net.UnixListener
		err error
	}
	results := make(chan result)
	done := make(chan struct{})
	defer close(done)
	serve := func(ln *net.UnixListener) {
		go func() {
			err := srv.Serve(ln)
			select {
			case results <- result{ln, err}:
			case <-done:
			}
		}()
	}
	s.mu.Lock()
	serve(s.ln)
	s.mu.Unlock()
	tick := time.NewTicker(s.check)
	defer tick.Stop()
	for {
		select {
		case r := <-results:
			s.mu.Lock()
			retired := s.retired[r.ln]
			delete(s.retired, r.ln)
			s.mu.Unlock()
			if !retired {
				return r.err
			}
		case <-tick.C:
			if ln := s.recreate(); ln != nil {
				serve(ln)
			}
		}
	}
}

// recreate creates the socket file again if it has disappeared, and
// returns its new listener (nil when nothing was done).
func (s *Socket) recreate() *net.UnixListener {
	// Gone: the file, or its directory (ENOTDIR: a file took the
	// directory's place).
	_, err := os.Lstat(s.path)
	if err == nil || !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
		s.noteForeign()
		return nil
	}
	ln, id, err := s.listen()
	if err != nil {
		// Checked every s.check, the same failure (a directory this
		// dlbd cannot make again) is said when it begins or changes.
		if s.unmade.Failed(err, time.Now()) {
			s.log.Error("the API socket disappeared and cannot be created again", "socket", s.path, "err", err,
				"remedy", "dlbctl cannot reach this dlbd, which forwards on; make the socket's directory writable again, "+
					"or restart dlbd (under dlbd.service the restart makes /run/dlb again)")
		}
		return nil
	}
	s.unmade.OK()
	s.mu.Lock()
	old := s.ln
	s.ln, s.id, s.foreign = ln, id, false
	s.retired[old] = true
	s.mu.Unlock()
	old.Close()
	s.log.Warn("the API socket had disappeared; created it again", "socket", s.path)
	return ln
}

// noteForeign logs, once, that the path names a file this Socket did not
// create.
func (s *Socket) noteForeign() {
	id, err := statID(s.path)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || id == s.id || s.foreign {
		return
	}
	s.foreign = true
	s.log.Warn("the API socket's path now names another file; leaving it alone (this dlbd still serves connections it has)", "socket", s.path)
}

// Close closes the listener and removes the socket file if it is still the
// one this Socket created.
func (s *Socket) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.ln.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	if id, serr := statID(s.path); serr == nil && id == s.id {
		if rerr := os.Remove(s.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, fmt.Errorf("removing socket: %w", rerr))
		}
	}
	return err
}
