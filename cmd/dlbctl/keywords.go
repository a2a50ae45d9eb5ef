package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// targetOpts say what a command's target argument may be.
type targetOpts struct {
	// optional: the command runs without a target (every object).
	optional bool
	// partial: trailing components may be left out (reports).
	partial bool
	// keywords: IBM's "keyword value" pairs may follow the target, each
	// standing for the flag of that name ("server set C:P:S weight 5").
	keywords bool
}

// targetArgs returns the argument check of a command that takes one target
// of the given depth (1 cluster, 2 port, 3 server). It normalises the
// target into a.target (see normTarget), sets the flags that keyword pairs
// stand for, and resolves host names in the address flags.
func (a *app) targetArgs(depth int, o targetOpts) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) == 0 && !o.optional:
			return usagef("%s needs a target (%s)", cmdName(cmd), targetForms[depth])
		case len(args) == 0:
			a.target = ""
			return nil
		case len(args) > 1 && !o.keywords:
			return usagef("%s takes one target (%s), got %d arguments", cmdName(cmd), targetForms[depth], len(args))
		}
		if err := keywordFlags(cmd, args[1:]); err != nil {
			return err
		}
		t, err := a.normTarget(cmd.Context(), args[0], depth, o.partial)
		if err != nil {
			return err
		}
		a.target = t
		return a.resolveFlags(cmd, targetFamily(strings.Split(t, "@")), "returnaddress", "router")
	}
}

// resolveFlags resolves host names given as the values of the named
// address flags, where set.
func (a *app) resolveFlags(cmd *cobra.Command, fam int, names ...string) error {
	for _, name := range names {
		v := stringFlag(cmd, name)
		if v == nil {
			continue
		}
		addr, err := a.resolveParam(cmd.Context(), name, *v, fam)
		if err != nil {
			return err
		}
		if addr != *v {
			if err := cmd.Flags().Set(name, addr); err != nil {
				return usagef("--%s: %v", name, err)
			}
		}
	}
	return nil
}

// keywordArity gives the number of values of keywords that take more than
// one.
var keywordArity = map[string]int{"proportions": 4}

// keywordFlags sets the command's flags from IBM-style "keyword value"
// pairs: a keyword is a flag's name or its unique prefix, followed by the
// flag's value (four for proportions; yes or no for a switch). An unknown
// or ambiguous keyword, a keyword without its value, and a keyword that
// repeats a flag given as --flag are refused by name.
func keywordFlags(cmd *cobra.Command, args []string) error {
	names := keywordNames(cmd)
	seen := map[string]bool{}
	for i := 0; i < len(args); {
		name, err := matchKeyword(cmd, args[i], names)
		if err != nil {
			return err
		}
		f := cmd.Flags().Lookup(name)
		if seen[name] || f.Changed {
			return usagef("%s given twice (as a keyword and as --%s, or as two keywords)", name, name)
		}
		seen[name] = true
		n := keywordArity[name]
		if n == 0 {
			n = 1
		}
		if len(args)-i-1 < n {
			what := "a value"
			if n > 1 {
				what = strings.Repeat("N ", n-1) + "N"
				what = "its " + what
			}
			return usagef("keyword %s needs %s", name, what)
		}
		v := strings.Join(args[i+1:i+1+n], " ")
		if f.Value.Type() == "bool" {
			b, ok := parseYesNo(v)
			if !ok {
				return usagef("keyword %s: %q is not yes or no", name, v)
			}
			v = b
		}
		if err := cmd.Flags().Set(name, v); err != nil {
			return usagef("keyword %s: invalid value %q: %v", name, v, innerFlagError(err))
		}
		i += 1 + n
	}
	return nil
}

// keywordNames lists the keywords of cmd, sorted: its own flags' names.
func keywordNames(cmd *cobra.Command) []string {
	var names []string
	cmd.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "help" {
			names = append(names, f.Name)
		}
	})
	slices.Sort(names)
	return names
}

// matchKeyword resolves a keyword or its unique prefix among names.
func matchKeyword(cmd *cobra.Command, kw string, names []string) (string, error) {
	var found []string
	for _, n := range names {
		if n == kw {
			return n, nil
		}
		if kw != "" && strings.HasPrefix(n, kw) {
			found = append(found, n)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		hint := ""
		if _, ok := literalAddr(kw); ok {
			// "cluster add 10.0.0.1 10.0.0.2": a second target.
			hint = fmt.Sprintf("; %s takes one target: join several with '+' (%s+%s)", cmdName(cmd), cmd.Flags().Arg(0), kw)
		}
		if sw := switchGiven(cmd); sw != "" {
			if _, ok := parseYesNo(kw); ok {
				// "--configure no": the flag took no value, and "no"
				// came after the target.
				hint = fmt.Sprintf("; a switch takes its value after '=' (--%s=%s), or give it as a keyword (%s %s)", sw, kw, sw, kw)
			}
		}
		return "", usagef("unknown keyword %q for %s (keywords: %s)%s", kw, cmdName(cmd), strings.Join(names, ", "), hint)
	}
	return "", usagef("ambiguous keyword %q for %s: %s", kw, cmdName(cmd), strings.Join(found, " or "))
}

// parseYesNo maps IBM's yes/no (and true/false, on/off) to "true" or
// "false".
func parseYesNo(s string) (string, bool) {
	switch strings.ToLower(s) {
	case "yes", "y", "true", "on", "1":
		return "true", true
	case "no", "n", "false", "off", "0":
		return "false", true
	}
	return "", false
}

// switchGiven returns the name of a switch (a bool flag) given on cmd's
// command line, or "".
func switchGiven(cmd *cobra.Command) string {
	name := ""
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if f.Value.Type() == "bool" && name == "" {
			name = f.Name
		}
	})
	return name
}

// innerFlagError shortens pflag's "strconv.ParseInt: parsing "x": invalid
// syntax" to "invalid syntax".
func innerFlagError(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		return msg[i+2:]
	}
	return msg
}
