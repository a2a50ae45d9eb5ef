package config

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

var (
	fuzzObjects = []Object{Executor, Cluster, Port, Server, Manager, Advisor, Metric, Heartbeat, Backup, Reach, BGP, Neighbor}
	fuzzActions = []Action{Start, Stop, Set, Add, Remove, Down, Up, Quiesce, Unquiesce}
)

// FuzzEditorOps applies two operations of any object, action, target and
// parameters (what dlbctl and the API can send) to fuzzBase's
// configuration. Whatever they are: no panic; Prepare leaves the
// committed configuration as it was; a refusal is an *OpError whose
// message names what was wrong on one line; and an accepted batch makes a
// configuration that the whole validation accepts too (the editor
// validates only what changed), that an editor can start from, and that
// is equal to itself after a round trip through the configuration file.
func FuzzEditorOps(f *testing.F) {
	idx := func(o Object, a Action) (uint8, uint8) {
		return uint8(slices.Index(fuzzObjects, o)), uint8(slices.Index(fuzzActions, a))
	}
	add := func(o Object, a Action, target, n1, v1, n2, v2 string, o2 Object, a2 Action, target2 string) {
		oi, ai := idx(o, a)
		oi2, ai2 := idx(o2, a2)
		f.Add(oi, ai, target, n1, v1, n2, v2, oi2, ai2, target2)
	}
	add(Server, Add, vip+"@80@198.18.0.23", "weight", "7", "", "", Server, Down, vip+"@80@198.18.0.23")
	add(Server, Add, vip+"@81@198.18.1.12", "returnaddress", "198.18.0.3", "router", "198.18.0.254", Manager, Start, "")
	add(Server, Set, "@@198.18.0.21", "weight", "x", "", "", Cluster, Remove, vip)
	add(Cluster, Set, vip, "proportions", "30 30 20 20", "", "", Manager, Start, "")
	add(Advisor, Start, vip+"@80", "advisor", "http", "fall", "3", Server, Up, "@80@198.18.0.22")
	add(Port, Set, vip+"@443", "stickytime", "60", "", "", Manager, Quiesce, vip+"@80@198.18.0.22")
	add(Backup, Add, "", "role", "primary", "recovery", "auto", Reach, Add, "198.18.0.254")
	add(BGP, Set, "", "asn", "65001", "routerid", "198.18.0.2", Cluster, Set, vip)
	add(Executor, Set, "", "nfa", "2001:2::2", "", "", Cluster, Add, "2001:2::100")
	add(Port, Remove, vip+"@443", "", "", "", "", Server, Remove, "@80@198.18.0.21")
	f.Fuzz(func(t *testing.T, obj, act uint8, target, n1, v1, n2, v2 string, obj2, act2 uint8, target2 string) {
		// Text reaches the editor decoded from JSON (the API) or YAML (the
		// file): valid UTF-8, JSON's decoder replacing what is not.
		for _, x := range []*string{&target, &n1, &v1, &n2, &v2, &target2} {
			*x = strings.ToValidUTF8(*x, "\uFFFD")
		}
		ed := fuzzBase(t)
		before := ed.Config().Clone()
		first := Op{Object: fuzzObjects[int(obj)%len(fuzzObjects)], Action: fuzzActions[int(act)%len(fuzzActions)], Target: target}
		for _, p := range [][2]string{{n1, v1}, {n2, v2}} {
			if p[0] != "" {
				first.Params = append(first.Params, Param{Name: p[0], Values: strings.Fields(p[1])})
			}
		}
		second := Op{Object: fuzzObjects[int(obj2)%len(fuzzObjects)], Action: fuzzActions[int(act2)%len(fuzzActions)], Target: target2}
		e, err := ed.Prepare([]Op{first, second})
		if !reflect.DeepEqual(ed.Config(), before) {
			t.Fatalf("Prepare(%v, %v) changed the committed configuration", first, second)
		}
		if err != nil {
			var oe *OpError
			if !errors.As(err, &oe) || oe.Index < -1 || oe.Index > 1 {
				t.Fatalf("refusal %T %v: want an *OpError naming op -1, 0 or 1", err, err)
			}
			if msg := err.Error(); msg == "" || strings.ContainsAny(msg, "\n\x00") {
				t.Fatalf("refusal %q: want one line saying what was wrong", msg)
			}
			return
		}
		if err := Validate(e.Next); err != nil {
			t.Fatalf("%v, %v: accepted, but the whole configuration is invalid: %v", first, second, err)
		}
		if _, err := NewEditor(e.Next, Options{}); err != nil {
			t.Fatalf("%v, %v: accepted, but an editor cannot start from it: %v", first, second, err)
		}
		data, err := MarshalFile(e.Next)
		if err != nil {
			t.Fatalf("%v, %v: writing the configuration file: %v", first, second, err)
		}
		back, err := ReadFile(data, Options{})
		if err != nil {
			t.Fatalf("%v, %v: the configuration file it writes does not read: %v\n%s", first, second, err, data)
		}
		if !sameConfig(back.Config, e.Next) {
			t.Fatalf("%v, %v: the configuration file reads back differently: %+v\n%s", first, second, Diff(e.Next, back.Config), data)
		}
		ed.Commit(e)
	})
}

// fuzzBase is base (a MAC and a NAT port) with a primary's high
// availability (haBase), a BGP speaker with a neighbour, an advisor of
// every cluster's port 80 and one of the NAT port, so that operations on
// each kind of object find something to change.
func fuzzBase(t testing.TB) *Editor {
	t.Helper()
	ed := haBase(t)
	mustApply(t, ed,
		op(BGP, Set, "", "asn", "65001", "routerid", "198.18.0.2"),
		op(Neighbor, Add, "198.18.0.254", "remoteas", "65000"),
		op(Cluster, Set, vip, "announce", "yes"),
		op(Advisor, Start, "@80", "advisor", "http", "interval", "2"),
		op(Advisor, Start, vip+"@81", "advisor", "connect"),
	)
	return ed
}
