package gendocs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

func tree() *cobra.Command {
	root := &cobra.Command{Use: "demo", Short: "A demo tool", Long: "demo does things."}
	root.PersistentFlags().String("socket", "/run/demo.sock", "the socket")
	sub := &cobra.Command{Use: "server", Short: "Servers"}
	add := &cobra.Command{Use: "add ADDR", Short: "Add a server", Run: func(*cobra.Command, []string) {}}
	add.Flags().Int("weight", 0, "the weight")
	sub.AddCommand(add)
	root.AddCommand(sub)
	return root
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	date := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	if err := Write(tree(), dir, Options{Section: "8", Source: "dlb 1.0", Date: date}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ file, want string }{
		{"man/demo.8", `.TH "DEMO" "8" "Jan 2026" "dlb 1.0" "dlb Manual"`},
		{"man/demo.8", "demo does things."},
		{"man/demo-server-add.8", `\fB--weight\fP`},
		{"completions/bash/demo", "__start_demo"},
		{"completions/zsh/_demo", "#compdef demo"},
		{"completions/fish/demo.fish", "complete -c demo"},
	} {
		b, err := os.ReadFile(filepath.Join(dir, c.file))
		if err != nil {
			t.Errorf("%s: %v", c.file, err)
			continue
		}
		if !strings.Contains(string(b), c.want) {
			t.Errorf("%s lacks %q:\n%.400s", c.file, c.want, b)
		}
	}
}

func TestWriteNeedsSection(t *testing.T) {
	if err := Write(tree(), t.TempDir(), Options{}); err == nil || !strings.Contains(err.Error(), "section") {
		t.Errorf("got %v, want an error naming the section", err)
	}
}

func TestMainIgnoresOtherArgs(t *testing.T) {
	for _, args := range [][]string{{"demo"}, {"demo", "__gendocs"}, {"demo", "server", "add", "x"}} {
		if Main(args, tree, "8") {
			t.Errorf("Main(%q) took over the command line", args)
		}
	}
}
