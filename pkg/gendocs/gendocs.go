// Package gendocs writes the man pages and shell completions of a cobra
// command tree, for packaging: the package's man pages and completions are
// generated from the very commands the binaries run, at build time.
package gendocs

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// Options say how the pages are labelled.
type Options struct {
	// Section is the manual section: "1" for user commands, "8" for
	// daemons and administration commands.
	Section string
	// Source is the footer's left text, e.g. "dlb 1.2.0".
	Source string
	// Date is the pages' date (the build's, for reproducible pages).
	Date time.Time
}

// Write writes, under dir, man/NAME.SECTION (and one page per
// subcommand, NAME-SUB.SECTION) and the completions
// completions/bash/NAME, completions/zsh/_NAME and
// completions/fish/NAME.fish of root.
func Write(root *cobra.Command, dir string, o Options) error {
	if o.Section == "" {
		return fmt.Errorf("writing docs of %s: no man section", root.Name())
	}
	root.DisableAutoGenTag = true
	man := filepath.Join(dir, "man")
	if err := os.MkdirAll(man, 0o755); err != nil {
		return fmt.Errorf("writing man pages: %w", err)
	}
	date := o.Date
	hdr := &doc.GenManHeader{Section: o.Section, Source: o.Source, Manual: "dlb Manual", Date: &date}
	if err := doc.GenManTree(root, hdr, man); err != nil {
		return fmt.Errorf("writing man pages of %s: %w", root.Name(), err)
	}
	name := root.Name()
	for _, c := range []struct {
		path string
		gen  func(f *os.File) error
	}{
		{filepath.Join(dir, "completions", "bash", name), func(f *os.File) error { return root.GenBashCompletionV2(f, true) }},
		{filepath.Join(dir, "completions", "zsh", "_"+name), func(f *os.File) error { return root.GenZshCompletion(f) }},
		{filepath.Join(dir, "completions", "fish", name+".fish"), func(f *os.File) error { return root.GenFishCompletion(f, true) }},
	} {
		if err := os.MkdirAll(filepath.Dir(c.path), 0o755); err != nil {
			return fmt.Errorf("writing completions: %w", err)
		}
		f, err := os.Create(c.path)
		if err != nil {
			return fmt.Errorf("writing completions: %w", err)
		}
		err = c.gen(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("writing %s: %w", c.path, err)
		}
	}
	return nil
}

// Main is the body of a binary's hidden documentation mode (built only
// with -tags gendocs): "PROG __gendocs DIR SOURCE" writes root's docs into
// DIR and exits. The date is $SOURCE_DATE_EPOCH's when set, so that a
// rebuild of the same source makes the same pages. It returns false,
// doing nothing, for any other command line.
func Main(args []string, root func() *cobra.Command, section string) bool {
	if len(args) != 4 || args[1] != "__gendocs" {
		return false
	}
	date := time.Now().UTC()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		var sec int64
		if _, err := fmt.Sscan(s, &sec); err != nil {
			fmt.Fprintf(os.Stderr, "SOURCE_DATE_EPOCH %q: %v\n", s, err)
			os.Exit(1)
		}
		date = time.Unix(sec, 0).UTC()
	}
	if err := Write(root(), args[2], Options{Section: section, Source: args[3], Date: date}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return true
}
