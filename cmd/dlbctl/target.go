package main

// IBM operators' habits, normalised into the wire grammar dlbd speaks
// (cluster@port@server, '+' lists, empty components as wildcards):
//
//   - dscontrol separates with ':' ("9.67.131.153:80:server1"), which is
//     unambiguous for IPv4 addresses and host names; IPv6 addresses take
//     brackets then ("[2001:2::100]:80:[2001:2::21]"). An unbracketed IPv6
//     address with '@' separators stays as it always was.
//   - "::" (and ":") stand for every cluster, port and server.
//   - reports take partial targets: "server report VIP@80" is VIP@80@.
//   - host names are resolved once, here, and the address sent; dlbd only
//     ever sees addresses.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// resolver looks host names up; *net.Resolver implements it. Tests inject
// their own, so that no test depends on /etc/hosts or DNS.
type resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// resolveTimeout bounds one name's resolution.
const resolveTimeout = 5 * time.Second

// targetForms names the forms of a target of each depth, for messages.
var targetForms = [...]string{"", "VIP", "VIP@PORT or VIP:PORT", "VIP@PORT@ADDR or VIP:PORT:ADDR"}

// normTarget turns a target in any of the accepted forms into the wire
// grammar with depth components. A partial target (reports) may have
// fewer components: the missing ones are wildcards. Host names are
// resolved (and a line says what to).
func (a *app) normTarget(ctx context.Context, s string, depth int, partial bool) (string, error) {
	if s == "" || s == ":" || s == "::" {
		if !partial && s != "" && depth == 1 {
			return "", usagef("%q is not a cluster address", s)
		}
		// dscontrol's wildcards for everything.
		return strings.Repeat("@", depth-1), nil
	}
	comps, err := splitTarget(s)
	if err != nil {
		return "", err
	}
	if len(comps) > depth || len(comps) < depth && !partial {
		hint := ""
		if strings.Contains(s, "::") || strings.Count(s, ":") > depth {
			hint = "; with ':' as the separator, IPv6 addresses go in brackets ([2001:2::100]:80:[2001:2::21])"
		}
		return "", usagef("%q does not have the form %s%s", s, targetForms[depth], hint)
	}
	for len(comps) < depth {
		comps = append(comps, "")
	}
	// Names resolve to the family of the addresses given beside them.
	fam := targetFamily(comps)
	out := make([]string, len(comps))
	for i, c := range comps {
		if i == 1 { // the port: dlbd checks it
			if strings.ContainsAny(c, "[]:") {
				return "", mixedError(s)
			}
			out[i] = c
			continue
		}
		field := "cluster"
		if i == 2 {
			field = "server"
		}
		items := strings.Split(c, "+")
		for j, item := range items {
			if items[j], err = a.resolveItem(ctx, field, s, item, fam); err != nil {
				return "", err
			}
		}
		out[i] = strings.Join(items, "+")
	}
	return strings.Join(out, "@"), nil
}

// splitTarget splits a target into its components, by '@' or by ':'
// (outside brackets), refusing a mix of the two.
func splitTarget(s string) ([]string, error) {
	colons, err := splitOutsideBrackets(s, ':')
	if err != nil {
		return nil, err
	}
	if strings.Contains(s, "@") {
		comps := strings.Split(s, "@")
		for _, c := range comps {
			if strings.Contains(c, ":") && !isAddrList(c) {
				return nil, mixedError(s)
			}
		}
		return comps, nil
	}
	// No separator, or an IPv6 address (list): one component. An IPv6
	// address with an IPv4 address in it ("::198.18.0.21") is taken for
	// dscontrol's "::server" (every cluster and port); in brackets it is
	// the address.
	if len(colons) == 1 || isAddrList(s) && !strings.Contains(s, ".") {
		return []string{s}, nil
	}
	return colons, nil
}

// splitOutsideBrackets splits s at sep where sep is not inside [...].
func splitOutsideBrackets(s string, sep rune) ([]string, error) {
	var out []string
	depth, start := 0, 0
	for i, r := range s {
		switch {
		case r == '[':
			depth++
			if depth > 1 {
				return nil, usagef("%q: unbalanced brackets", s)
			}
		case r == ']':
			depth--
			if depth < 0 {
				return nil, usagef("%q: unbalanced brackets", s)
			}
		case r == sep && depth == 0:
			out = append(out, s[start:i])
			start = i + len(string(sep))
		}
	}
	if depth != 0 {
		return nil, usagef("%q: unbalanced brackets", s)
	}
	return append(out, s[start:]), nil
}

// isAddrList reports whether s is one or more IP addresses (bracketed or
// not) joined by '+'.
func isAddrList(s string) bool {
	for _, item := range strings.Split(s, "+") {
		if _, ok := literalAddr(item); !ok {
			return false
		}
	}
	return true
}

// literalAddr parses an address literal, an IPv6 one possibly in brackets.
func literalAddr(s string) (netip.Addr, bool) {
	if inner, ok := strings.CutPrefix(s, "["); ok {
		inner, ok = strings.CutSuffix(inner, "]")
		a, err := netip.ParseAddr(inner)
		return a, ok && err == nil && a.Is6() && !a.Is4In6()
	}
	a, err := netip.ParseAddr(s)
	return a, err == nil
}

func mixedError(s string) error {
	return usagef("%q mixes ':' and '@' as separators: use one of them (cluster:port:server, IPv6 addresses in brackets, or cluster@port@server)", s)
}

// targetFamily is the family of the address literals in the cluster and
// server components (4 or 6), or 0 if there are none or both.
func targetFamily(comps []string) int {
	fam := 0
	for i, c := range comps {
		if i == 1 {
			continue
		}
		for _, item := range strings.Split(c, "+") {
			a, ok := literalAddr(item)
			if !ok {
				continue
			}
			f := family(a)
			if fam != 0 && fam != f {
				return 0
			}
			fam = f
		}
	}
	return fam
}

func family(a netip.Addr) int {
	if a.Unmap().Is4() {
		return 4
	}
	return 6
}

// resolveItem returns one address item of a target as dlbd takes it: an
// address literal without brackets, a host name's address, or (anything
// else) the item unchanged, for dlbd to refuse by name.
func (a *app) resolveItem(ctx context.Context, field, target, item string, fam int) (string, error) {
	if item == "" {
		return item, nil
	}
	if addr, ok := literalAddr(item); ok {
		if strings.HasPrefix(item, "[") {
			return addr.String(), nil
		}
		return item, nil
	}
	if strings.ContainsAny(item, "[]") {
		return "", usagef("%q in %q: brackets enclose an IPv6 address", item, target)
	}
	if !isHostName(item) {
		return item, nil
	}
	addr, err := a.resolve(ctx, field, item, fam)
	if err != nil {
		return "", err
	}
	return addr.String(), nil
}

// resolveParam resolves an address parameter's value (nfa, router ...):
// a host name becomes its address; "none", addresses and anything else
// are sent as given. fam, if not 0, is the family the address must have.
func (a *app) resolveParam(ctx context.Context, field, v string, fam int) (string, error) {
	if _, ok := literalAddr(v); ok || v == "" || strings.EqualFold(v, "none") || !isHostName(v) {
		if addr, ok := literalAddr(v); ok && strings.HasPrefix(v, "[") {
			return addr.String(), nil
		}
		return v, nil
	}
	addr, err := a.resolve(ctx, field, v, fam)
	if err != nil {
		return "", err
	}
	return addr.String(), nil
}

// isHostName reports whether s can be a DNS host name: dot-separated
// labels of letters, digits, '-' and '_', with at least one letter (so
// that "10.0.0.300" is a bad address, not a name).
func isHostName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	letter := false
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			switch {
			case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '_':
				letter = true
			case r >= '0' && r <= '9', r == '-':
			default:
				return false
			}
		}
	}
	return letter
}

// resolveError is a host name given for field that cannot be used. It
// is a failed command (exit 1), like dlbd's refusal of a bad address
// would be, not a usage error.
type resolveError struct {
	field string
	err   error
}

func (e *resolveError) Error() string { return e.field + ": " + e.err.Error() }
func (e *resolveError) Unwrap() error { return e.err }

// resolve looks name up once and returns its one address, of family fam
// if fam is not 0, and says what it resolved to. A name with no address,
// or with several (both families, with nothing to choose by), is refused:
// the configuration must name one machine. field names what the address
// is for, in messages.
func (a *app) resolve(ctx context.Context, field, name string, fam int) (netip.Addr, error) {
	key := fmt.Sprintf("%s/%d", strings.ToLower(name), fam)
	if addr, ok := a.resolved[key]; ok {
		return addr, nil
	}
	fail := func(format string, args ...any) (netip.Addr, error) {
		return netip.Addr{}, &resolveError{field: field, err: fmt.Errorf(format, args...)}
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	addrs, err := a.env.resolver.LookupNetIP(ctx, "ip", name)
	if err != nil {
		var de *net.DNSError
		if errors.As(err, &de) && de.IsNotFound {
			return fail("cannot resolve %q: no such host", name)
		}
		return fail("cannot resolve %q: %w", name, err)
	}
	var all, fit []netip.Addr
	for _, addr := range addrs {
		addr = addr.Unmap().WithZone("")
		if slices.Contains(all, addr) {
			continue
		}
		all = append(all, addr)
		if fam == 0 || family(addr) == fam {
			fit = append(fit, addr)
		}
	}
	switch {
	case len(all) == 0:
		return fail("cannot resolve %q: it has no address", name)
	case len(fit) == 0:
		return fail("%q resolves to %s, none of them an IPv%d address like the others of the target; give the address",
			name, joinAddrs(all), fam)
	case len(fit) > 1:
		return fail("%q is ambiguous: it resolves to %s; give the address of the one meant", name, joinAddrs(fit))
	}
	if a.resolved == nil {
		a.resolved = map[string]netip.Addr{}
	}
	a.resolved[key] = fit[0]
	fmt.Fprintf(a.env.stderr, "dlbctl: %s resolved to %s\n", name, fit[0])
	return fit[0], nil
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	if len(s) > 1 {
		return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
	}
	return s[0]
}
