//go:build !linux

package doctor

import "errors"

func openLink(string, uint16) (link, error) {
	return nil, errors.New("server checks need Linux packet sockets")
}

// CanProbe returns why the checks cannot run here.
func CanProbe() error {
	return errors.New("server checks need Linux packet sockets")
}
