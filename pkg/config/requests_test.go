package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/lb"
)

// fakeCheck is an Options.CheckRequest: the http advisor refuses the
// request "bad" and the response "badresp", other advisors use neither.
func fakeCheck(advisor, request, response string) error {
	if advisor != "http" {
		return nil
	}
	if request == "bad" {
		return errors.New(`advisorrequest: bad path "bad"`)
	}
	if response == "badresp" {
		return errors.New(`advisorresponse: bad status range "x"`)
	}
	return nil
}

// requestEditor is base's configuration with an http advisor on port 80,
// a connect advisor on 443, and servers holding the request "bad" from
// before requests were checked: .22 on 80 (probed by http) and .21 on
// 443 (probed by connect only), under an editor that checks requests.
func requestEditor(t *testing.T) *Editor {
	t.Helper()
	ed := base(t)
	mustApply(t, ed, op(Server, Set, vip+"@80@198.18.0.22", "advisorrequest", "bad"),
		op(Server, Set, vip+"@443@198.18.0.21", "advisorrequest", "bad"),
		op(Advisor, Start, vip+"@80", "advisor", "http"), op(Advisor, Start, "@443", "advisor", "connect"))
	checked, err := NewEditor(ed.Config(), Options{CheckRequest: fakeCheck})
	if err != nil {
		t.Fatal(err)
	}
	return checked
}

func TestCheckRequests(t *testing.T) {
	tests := []struct {
		name   string
		ops    []Op
		field  string // "" when accepted
		object string
		msg    string
	}{
		{name: "new server, bad request", ops: []Op{op(Server, Add, vip+"@80@198.18.0.23", "advisorrequest", "bad")},
			field: "advisorrequest", object: vip + "@80@198.18.0.23", msg: `the http advisor of port 80 could not use it: bad path "bad"`},
		{name: "request changed to a bad one", ops: []Op{op(Server, Set, vip+"@80@198.18.0.21", "advisorrequest", "bad")},
			field: "advisorrequest", object: vip + "@80@198.18.0.21"},
		{name: "response changed to a bad one", ops: []Op{op(Server, Set, vip+"@80@198.18.0.21", "advisorresponse", "badresp")},
			field: "advisorresponse", object: vip + "@80@198.18.0.21", msg: `bad status range "x"`},
		{name: "a good request", ops: []Op{op(Server, Set, vip+"@80@198.18.0.21", "advisorrequest", "good")}},
		{name: "bad for http, on a port only connect probes", ops: []Op{op(Server, Add, vip+"@443@198.18.0.23", "advisorrequest", "bad")}},
		{name: "http started where a server's request is bad", ops: []Op{op(Advisor, Start, vip+"@443", "advisor", "http")},
			field: "advisorrequest", object: vip + "@443@198.18.0.21", msg: "the http advisor of port 443"},
		{name: "a server with a bad request set down", ops: []Op{op(Server, Down, vip+"@80@198.18.0.22")}},
		{name: "its weight changed", ops: []Op{op(Server, Set, vip+"@80@198.18.0.22", "weight", "5")}},
		{name: "its advisor's interval changed", ops: []Op{op(Advisor, Set, vip+"@80", "advisor", "http", "interval", "3")}},
		{name: "two bad servers: the first named", ops: []Op{op(Server, Add, vip+"@80@198.18.0.29", "advisorrequest", "bad"),
			op(Server, Add, vip+"@80@198.18.0.23", "advisorrequest", "bad")},
			field: "advisorrequest", object: vip + "@80@198.18.0.23"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ed := requestEditor(t)
			before := ed.Config().Clone()
			e, err := ed.Prepare(tc.ops)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var fe *lb.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || fe.Object != tc.object || !strings.Contains(fe.Msg, tc.msg) {
				t.Fatalf("got %v (edit %v), want %s refused for %s with %q", err, e, tc.field, tc.object, tc.msg)
			}
			if !reflect.DeepEqual(ed.Config(), before) {
				t.Fatal("a refused change changed the configuration")
			}
		})
	}
}

func TestCheckRequestsOfAWholeConfiguration(t *testing.T) {
	ed := requestEditor(t)
	next := ed.Config().Clone()
	// The file keeps .22's old request on 80 (not checked again) and
	// gives .21 on port 80 a bad one.
	next.Clusters[0].Ports[0].Servers[0].AdvisorRequest = "bad"
	_, err := ed.PrepareConfig(next)
	var fe *lb.FieldError
	if !errors.As(err, &fe) || fe.Field != "advisorrequest" || fe.Object != vip+"@80@198.18.0.21" {
		t.Fatalf("got %v, want .21's advisorrequest refused", err)
	}
	next.Clusters[0].Ports[0].Servers[0].AdvisorRequest = ""
	if _, err := ed.PrepareConfig(next); err != nil {
		t.Fatalf("the same file with .21 fixed: %v", err)
	}
}

func TestCheckRequestsWhole(t *testing.T) {
	ed := requestEditor(t)
	// The editor's configuration holds .22@80's old "bad" under http:
	// checked whole, it is refused; .21@443's is under connect only.
	var fe *lb.FieldError
	if err := CheckRequests(ed.Config(), fakeCheck); !errors.As(err, &fe) || fe.Object != vip+"@80@198.18.0.22" {
		t.Fatalf("got %v, want .22@80's advisorrequest refused", err)
	}
	if err := CheckRequests(ed.Config(), nil); err != nil {
		t.Fatalf("no check: %v", err)
	}
	if err := CheckRequests(base(t).Config(), fakeCheck); err != nil {
		t.Fatalf("no advisor: %v", err)
	}
}
