//go:build gendocs

package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/dlbproject/dlb/pkg/gendocs"
)

// Built with -tags gendocs only ("make package"): "dlbmetricd __gendocs
// DIR SOURCE" writes dlbmetricd's man page and completions.
func init() {
	if gendocs.Main(os.Args, func() *cobra.Command { return newCommand(os.Stdout, os.Stderr) }, "8") {
		os.Exit(0)
	}
}
