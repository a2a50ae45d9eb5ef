package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// dlbdLine is a dlbd command line in prose or a block: "dlbd" and the
// flags that follow it, each with its value if it has one.
var dlbdLine = regexp.MustCompile(`\bdlbd((?:[ \t]+--[a-z][a-z-]*(?:=\S+|[ \t]+[^\s-]\S*)?)+)`)

// dlbdOpts is a DLBD_OPTS setting of /etc/default/dlbd.
var dlbdOpts = regexp.MustCompile(`DLBD_OPTS="([^"]*)"`)

// TestDocumentedOptions: the dlbd command lines README.md and the files
// the package installs show name flags dlbd has, and every DLBD_OPTS of
// /etc/default/dlbd (the packaged examples) parses.
func TestDocumentedOptions(t *testing.T) {
	files, err := filepath.Glob("../../packaging/etc/*")
	if err != nil {
		t.Fatal(err)
	}
	flag := regexp.MustCompile(`--([a-z][a-z-]*)`)
	lines, opts := 0, 0
	for _, f := range append(files, "../../README.md") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range dlbdLine.FindAllStringSubmatch(string(b), -1) {
			lines++
			for _, fm := range flag.FindAllStringSubmatch(m[1], -1) {
				if fm[1] != "help" && newCommand().Flags().Lookup(fm[1]) == nil {
					t.Errorf("%s: %q: dlbd has no flag --%s", filepath.Base(f), strings.TrimSpace(m[0]), fm[1])
				}
			}
		}
		for _, m := range dlbdOpts.FindAllStringSubmatch(string(b), -1) {
			opts++
			if err := newCommand().ParseFlags(strings.Fields(m[1])); err != nil {
				t.Errorf("%s: %s: %v", filepath.Base(f), m[0], err)
			}
		}
	}
	t.Logf("%d dlbd command lines, %d DLBD_OPTS", lines, opts)
	if lines < 8 || opts < 4 {
		t.Errorf("found %d dlbd command lines and %d DLBD_OPTS: want at least 8 and 4", lines, opts)
	}
}
