package metricserver

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/dlbproject/dlb/pkg/smallfile"
)

// maxSecretFile bounds how much of a secret file is read.
const maxSecretFile = 4096

// ErrSecretPermissions is wrapped by LoadSecret's error when the secret
// file may be read or written by its group or by others.
var ErrSecretPermissions = smallfile.ErrNotPrivate

// LoadSecret reads a shared secret from a file. The secret is the file's
// content without leading and trailing white space (so a file written with
// "echo" or base64 works), and must be at least MinSecretLen bytes long.
//
// The file must be a regular file (or a symbolic link to one) of at most
// 4 KiB that no one but its owner and this process's user may access (mode
// 0600 or 0400, or an ACL that names no one else, as systemd gives a
// LoadCredential= file). The error for a wider access wraps
// ErrSecretPermissions and names the command that fixes it.
func LoadSecret(path string) ([]byte, error) {
	if path == "" {
		return nil, errors.New("no secret file given")
	}
	b, err := smallfile.ReadPrivate(path, maxSecretFile)
	if err != nil {
		return nil, fmt.Errorf("reading secret file: %w", err)
	}
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0:
		return nil, fmt.Errorf("secret file %s is empty; create one with: head -c 32 /dev/urandom | base64 > %s", path, path)
	case len(b) < MinSecretLen:
		return nil, fmt.Errorf("secret in %s is %d bytes, shorter than %d; create one with: head -c 32 /dev/urandom | base64 > %s", path, len(b), MinSecretLen, path)
	}
	return b, nil
}
