package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/client"
	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/smallfile"
)

func (a *app) fileCmd() *cobra.Command {
	save := &cobra.Command{
		Use:   "save FILE [--force]",
		Short: "Save the configuration as a script of dlbctl commands",
		Long: `Save dlbd's configuration as a script of dlbctl commands that recreates
it with "dlbctl file load". The file is replaced atomically; an existing
FILE is kept unless --force is given. FILE "-" writes to standard output.`,
		Example: `  dlbctl file save /etc/dlb/dlb.cfg
  dlbctl file save /etc/dlb/dlb.cfg --force
  dlbctl file save -`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("file save needs one FILE, got %d arguments", len(args))
			}
			return nil
		},
		RunE: a.runE(a.fileSave),
	}
	save.Flags().Bool("force", false, "overwrite FILE if it exists (a regular file, keeping its mode; through a symbolic link, keeping the link)")

	load := &cobra.Command{
		Use:   "load FILE",
		Short: "Apply a script of dlbctl commands as one batch: all or nothing",
		Long: `Apply a script of dlbctl commands, such as "dlbctl file save" writes, as
one batch: dlbd applies all of it or, if it refuses any line, none of it.

The script has one command per line, without "dlbctl" (a leading "dlbctl"
is allowed). Blank lines and text after '#' are ignored; words may be quoted
with '...' or "...". Only commands that change the configuration may
appear: reports, file, version and completion are refused. The script is
checked completely before anything is sent; an error names FILE:LINE.

The script applies on top of the running configuration, like dscontrol's
"file appendload": what it adds must not exist yet.`,
		Example: `  dlbctl file load /etc/dlb/dlb.cfg`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("file load needs one FILE, got %d arguments", len(args))
			}
			return nil
		},
		RunE: a.runE(a.fileLoad),
	}

	return a.noun("file", "Save the configuration as a script, and load such scripts",
		`  dlbctl file save /etc/dlb/dlb.cfg
  dlbctl file load /etc/dlb/dlb.cfg`,
		save, load)
}

func (a *app) fileSave(cmd *cobra.Command, args []string) error {
	path := args[0]
	force, _ := cmd.Flags().GetBool("force")
	toStdout := path == "-"
	// Checked before asking dlbd, so that a mistyped name costs nothing;
	// writeFileAtomic checks again without a race.
	if !toStdout {
		// What --force could not replace is refused as such first.
		if _, _, err := saveTarget(path); err != nil {
			return err
		}
		if _, err := os.Lstat(path); err == nil && !force {
			return usagef("%s exists; use --force to overwrite it", path)
		}
	}
	script, err := a.client().ConfigScript(cmd.Context())
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	from := a.socket
	if a.remote.Address != "" {
		from = "https://" + a.remote.Address
	}
	fmt.Fprintf(&buf, "# dlb configuration saved by \"dlbctl file save\" from %s\n", from)
	fmt.Fprintf(&buf, "# on %s.\n", a.env.now().Format(time.RFC3339))
	fmt.Fprintf(&buf, "# \"dlbctl file load FILE\" applies it as one batch: all or nothing.\n")
	buf.WriteString(script)
	if toStdout {
		_, err := a.env.stdout.Write(buf.Bytes())
		return err
	}
	if err := writeFileAtomic(path, buf.Bytes(), force); err != nil {
		return err
	}
	clusters, ports, servers := scriptCounts(script)
	fmt.Fprintf(a.env.stdout, "saved %s, %s and %s to %s\n", counted(clusters, "cluster", "clusters"), counted(ports, "port", "ports"),
		counted(servers, "server", "servers"), path)
	return nil
}

// scriptCounts counts the clusters, ports and servers a saved script
// adds.
func scriptCounts(script string) (clusters, ports, servers int) {
	for _, line := range strings.Split(script, "\n") {
		w := strings.Fields(line)
		if len(w) < 3 || w[1] != "add" {
			continue
		}
		switch w[0] {
		case "cluster":
			clusters += len(strings.Split(w[2], "+"))
		case "port":
			ports++
		case "server":
			parts := strings.Split(w[2], "@")
			servers += len(strings.Split(parts[len(parts)-1], "+"))
		}
	}
	return clusters, ports, servers
}

// saveTarget returns the file a forced save replaces at path and the mode
// it gives it: path itself, new (mode 0644) or a regular file (its mode
// kept); or, for a symbolic link, the regular file the link leads to, so
// that the link stays (a configuration kept elsewhere and linked into
// /etc). Anything else at path, a device such as /dev/null, a named pipe
// or a directory, is refused: renamed over, it would be replaced by a
// regular file.
func saveTarget(path string) (string, os.FileMode, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return path, 0o644, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("saving to %s: %w", path, err)
	}
	target := path
	if fi.Mode()&os.ModeSymlink != 0 {
		if target, err = filepath.EvalSymlinks(path); err != nil {
			return "", 0, fmt.Errorf("saving to %s, a symbolic link: %w", path, err)
		}
		if fi, err = os.Stat(target); err != nil {
			return "", 0, fmt.Errorf("saving to %s: %w", path, err)
		}
	}
	if !fi.Mode().IsRegular() {
		return "", 0, usagef("%s is %s, not a regular file: name a file, or - for standard output", path, smallfile.Kind(fi.Mode()))
	}
	return target, fi.Mode().Perm(), nil
}

// writeFileAtomic writes data to path through a temporary file in the
// same directory, so that a reader (or a crash) never sees half a file.
// Without force an existing path is kept; with it, what saveTarget names
// is replaced.
func writeFileAtomic(path string, data []byte, force bool) (err error) {
	mode := os.FileMode(0o644)
	if force {
		if path, mode, err = saveTarget(path); err != nil {
			return err
		}
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("creating %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("setting the mode of %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if force {
		if err := os.Rename(tmp, path); err != nil {
			return fmt.Errorf("replacing %s: %w", path, err)
		}
	} else {
		// A hard link creates path only if it does not exist, which a
		// rename cannot promise.
		if err := os.Link(tmp, path); err != nil {
			if errors.Is(err, os.ErrExist) {
				return usagef("%s exists; use --force to overwrite it", path)
			}
			return fmt.Errorf("creating %s: %w", path, err)
		}
		os.Remove(tmp)
	}
	// Make the new name durable too; failing here loses nothing written.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// quote quotes s for splitWords if it needs it.
func quote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\r\n'\"\\#") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}

// splitWords splits a script line into words like a (much) simpler shell:
// blanks separate words, '...' quotes literally, "..." quotes with \" and
// \\ escapes, a backslash outside quotes escapes the next character, and
// '#' at the start of a word begins a comment.
func splitWords(line string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '#' && !inWord:
			return words, nil
		case c == '\'':
			inWord = true
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("unterminated ' quote")
			}
			cur.WriteString(line[i+1 : i+1+j])
			i += j + 1
		case c == '"':
			inWord = true
			closed := false
			for i++; i < len(line); i++ {
				if line[i] == '"' {
					closed = true
					break
				}
				if line[i] == '\\' && i+1 < len(line) && (line[i+1] == '"' || line[i+1] == '\\') {
					i++
				}
				cur.WriteByte(line[i])
			}
			if !closed {
				return nil, errors.New(`unterminated " quote`)
			}
		case c == '\\':
			if i+1 == len(line) {
				return nil, errors.New("backslash at the end of the line (lines cannot be continued)")
			}
			inWord = true
			i++
			cur.WriteByte(line[i])
		default:
			inWord = true
			cur.WriteByte(c)
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// readBounded reads a file of at most maxConfigFile bytes (a pipe too:
// "dlbctl file load /dev/stdin"); /dev/zero is refused once that much was
// read, not read until memory runs out.
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAllBounded(f, path)
}

// readAllBounded reads r, named label in errors, to its end if it holds at
// most maxConfigFile bytes.
func readAllBounded(r io.Reader, label string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxConfigFile+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", label, err)
	}
	if len(data) > maxConfigFile {
		return nil, fmt.Errorf("%s: larger than %d MiB", label, maxConfigFile>>20)
	}
	return data, nil
}

func (a *app) fileLoad(cmd *cobra.Command, args []string) error {
	path := args[0]
	data, err := readBounded(path)
	if err != nil {
		return fmt.Errorf("reading script: %w", err)
	}
	if n, ok := config.FileLine(data); ok {
		return usagef("%s:%d: this is a configuration file (YAML or JSON), not a script of dlbctl commands: "+
			"\"dlbctl apply -f %s\" applies it", path, n, path)
	}
	ops, lines, err := a.parseScript(path, string(data))
	if err != nil {
		return err
	}
	if len(ops) == 0 {
		fmt.Fprintf(a.env.stdout, "%s: nothing to apply\n", path)
		return nil
	}
	res, err := a.client().Apply(cmd.Context(), ops...)
	if err != nil {
		var re *client.RefusedError
		if errors.As(err, &re) {
			if i := re.API.Op; i >= 0 && i < len(lines) {
				return fmt.Errorf("%s:%d: %w (nothing was applied)", path, lines[i], err)
			}
			return fmt.Errorf("%s: %w (nothing was applied)", path, err)
		}
		return err
	}
	fmt.Fprintf(a.env.stdout, "%s: applied %s\n", path, counted(res.Applied, "operation", "operations"))
	return a.printResult(res)
}

// parseScript turns a script into the batch of operations it stands for,
// and the line number of each operation. Each line runs through a fresh
// command tree in collect mode, so that it is parsed exactly as on the
// command line and a flag set on one line cannot leak into the next. The
// tree holds only the command the line names, when it names one: the
// whole tree for each line made 12,000 lines take 4 s.
func (a *app) parseScript(path, script string) ([]api.Op, []int, error) {
	var ops []api.Op
	var lines []int
	command := map[string]int{} // a name or alias -> its index in commands
	for i, build := range a.commands() {
		c := build()
		for _, name := range append([]string{c.Name()}, c.Aliases...) {
			command[name] = i
		}
	}
	lineErr := func(n int, help string, err error) error {
		return &usageError{err: fmt.Errorf("%s:%d: %w", path, n, err), help: help}
	}
	for i, text := range strings.Split(script, "\n") {
		n := i + 1
		words, err := splitWords(text)
		if err != nil {
			return nil, nil, lineErr(n, "-", err)
		}
		if len(words) > 0 && words[0] == "dlbctl" {
			words = words[1:]
		}
		if len(words) == 0 {
			continue
		}
		la := &app{env: a.env, collect: &ops}
		var keep func(int) bool
		if only, ok := command[words[0]]; ok {
			keep = func(j int) bool { return j == only }
		}
		root := la.newRootOf(keep)
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		root.SetArgs(words)
		// Cobra adds help and completion only when it executes; add them
		// now so that Find sees them and they are refused like reports.
		root.InitDefaultHelpCmd()
		root.InitDefaultCompletionCmd()
		c, _, err := root.Find(words)
		if err != nil {
			return nil, nil, lineErr(n, "dlbctl", err)
		}
		name := cmdName(c)
		// A noun (executor, server...) is run anyway: it names the
		// unknown verb, which says more than refusing the noun would.
		if c.Annotations[annotOp] != "true" && !c.HasSubCommands() {
			return nil, nil, lineErr(n, "-", fmt.Errorf("%q cannot be used in a script: only commands that change the configuration can", name))
		}
		before := len(ops)
		if _, err := root.ExecuteC(); err != nil {
			return nil, nil, lineErr(n, c.CommandPath(), err)
		}
		if len(ops) != before+1 {
			// A noun without a verb, or --help: cobra printed help
			// (discarded) instead of running a command.
			return nil, nil, lineErr(n, c.CommandPath(), fmt.Errorf("%q is not a complete command that changes the configuration", strings.Join(words, " ")))
		}
		lines = append(lines, n)
	}
	return ops, lines, nil
}
