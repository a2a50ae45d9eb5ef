//go:build gendocs

package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/dlbproject/dlb/pkg/gendocs"
)

// Built with -tags gendocs only ("make package"): "dlbctl __gendocs DIR
// SOURCE" writes dlbctl's man pages and completions.
func init() {
	if gendocs.Main(os.Args, func() *cobra.Command { return (&app{env: osEnv()}).newRoot() }, "1") {
		os.Exit(0)
	}
}
