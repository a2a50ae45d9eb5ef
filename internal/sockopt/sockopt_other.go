//go:build !linux

// Package sockopt holds the socket options dlb's outgoing connections set.
package sockopt

import "syscall"

// BindNoPort does nothing outside Linux (see sockopt_linux.go).
func BindNoPort(_, _ string, _ syscall.RawConn) error { return nil }
