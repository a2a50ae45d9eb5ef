//go:build gendocs

package main

import (
	"os"

	"github.com/dlbproject/dlb/pkg/gendocs"
)

// Built with -tags gendocs only ("make package"): "dlbd __gendocs DIR
// SOURCE" writes dlbd's man page and completions.
func init() {
	if gendocs.Main(os.Args, newCommand, "8") {
		os.Exit(0)
	}
}
