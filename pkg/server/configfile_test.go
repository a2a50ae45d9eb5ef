package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/dispatcher"
	"github.com/dlbproject/dlb/pkg/lb"
)

var errFake = errors.New("disk on fire")

// running is a configuration with one cluster, port and server.
func running() *lb.Config {
	cfg := lb.NewConfig()
	cl := lb.NewCluster(netip.MustParseAddr("198.18.0.100"))
	p := lb.NewPort(80)
	p.Servers = []lb.Server{{Address: netip.MustParseAddr("198.18.0.21"), Weight: 10}}
	cl.Ports = []lb.Port{p}
	cfg.Clusters = []lb.Cluster{cl}
	return &cfg
}

func TestGetConfig(t *testing.T) {
	eng := &fakeEngine{running: running()}
	h := New(eng, Options{})
	for _, tt := range []struct {
		query, contentType string
		status             int
		want               string // in the body
	}{
		{"", "application/yaml", 200, "          - address: 198.18.0.21\n            weight: 10\n"},
		{"?format=yaml", "application/yaml", 200, "clusters:\n  - address: 198.18.0.100\n"},
		{"?format=json", "application/json", 200, `"address": "198.18.0.21",`},
		{"?format=xml", "application/json", 400, `unknown format \"xml\" (want yaml or json)`},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, api.PathConfig+tt.query, nil))
		if rec.Code != tt.status || rec.Header().Get("Content-Type") != tt.contentType || !strings.Contains(rec.Body.String(), tt.want) {
			t.Errorf("%s: %d %s\n%s\nwant %d %s with %q", tt.query, rec.Code, rec.Header().Get("Content-Type"), rec.Body, tt.status, tt.contentType, tt.want)
		}
	}
}

// A file is read by the API, handed whole to the engine, and answered
// with what changed; a refused file names its line and path, from the
// reader or (placed on the line that set the field) from the engine.
func TestPostConfig(t *testing.T) {
	const file = `executor:
  started: true
  interface: eth9
clusters:
  - address: 198.18.0.100
    ports:
      - port: 80
        servers:
          - address: 198.18.0.21
            weight: 5
`
	tests := []struct {
		name      string
		query     string
		body      string
		engineErr error
		status    int
		replaced  int
		dryRun    bool
		result    api.ConfigResult
		err       api.Error
	}{
		{"applied", "", file, nil, 200, 1, false, api.ConfigResult{Applied: true, Changes: []api.ConfigChange{
			{Kind: "added", Command: "executor start --interface eth9 --xdp-mode auto"},
			{Kind: "changed", Command: "server set 198.18.0.100@80@198.18.0.21 weight 5", Was: "weight 10"},
		}}, api.Error{}},
		{"dry run", "?dry_run=true", file, nil, 200, 1, true, api.ConfigResult{Changes: []api.ConfigChange{
			{Kind: "added", Command: "executor start --interface eth9 --xdp-mode auto"},
			{Kind: "changed", Command: "server set 198.18.0.100@80@198.18.0.21 weight 5", Was: "weight 10"},
		}}, api.Error{}},
		{"no changes", "", "clusters:\n  - address: 198.18.0.100\n    ports:\n      - port: 80\n        servers:\n          - {address: 198.18.0.21, weight: 10}\n",
			nil, 200, 1, false, api.ConfigResult{Changes: []api.ConfigChange{}}, api.Error{}},
		{"bad dry_run", "?dry_run=maybe", file, nil, 400, 0, false, api.ConfigResult{},
			api.Error{Message: `dry_run: "maybe" is not true or false`, Field: "dry_run", Op: -1}},
		{"refused by the reader", "", strings.Replace(file, "weight: 5", "weight: 50", 1), nil, 400, 0, false, api.ConfigResult{},
			api.Error{Message: "line 10: clusters[0].ports[0].servers[0].weight: 50 is outside 0..20 (the port's weightbound)",
				Field: "weight", Op: -1, Line: 10, Path: "clusters[0].ports[0].servers[0].weight"}},
		{"refused by the engine", "", file, lb.Errorf("interface", "", `looking up interface "eth9": Link not found`), 400, 1, false, api.ConfigResult{},
			api.Error{Message: `line 3: executor.interface: looking up interface "eth9": Link not found`, Field: "interface", Op: -1, Line: 3, Path: "executor.interface"}},
		{"a failure of dlbd's own", "", file, errFake, 500, 1, false, api.ConfigResult{}, api.Error{Message: "disk on fire", Op: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eng := &fakeEngine{running: running(), replaceErr: tt.engineErr}
			rec := httptest.NewRecorder()
			New(eng, Options{}).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, api.PathConfig+tt.query, strings.NewReader(tt.body)))
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.status, rec.Body)
			}
			if len(eng.replaced) != tt.replaced || (tt.replaced > 0 && eng.replaced[0].dryRun != tt.dryRun) {
				t.Errorf("Replace calls %+v, want %d with dry run %v", eng.replaced, tt.replaced, tt.dryRun)
			}
			if tt.status == 200 {
				var res api.ConfigResult
				if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(res, tt.result) {
					t.Errorf("result %+v, want %+v", res, tt.result)
				}
				return
			}
			var ae api.Error
			if err := json.Unmarshal(rec.Body.Bytes(), &ae); err != nil {
				t.Fatal(err)
			}
			if ae != tt.err {
				t.Errorf("error %+v, want %+v", ae, tt.err)
			}
		})
	}

	// Too large a file is refused before it is read.
	rec := httptest.NewRecorder()
	eng := &fakeEngine{}
	New(eng, Options{MaxRequestSize: 1024}).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, api.PathConfig, strings.NewReader(strings.Repeat("# x\n", 300))))
	if rec.Code != http.StatusRequestEntityTooLarge || len(eng.replaced) != 0 {
		t.Errorf("a file over the limit: status %d, %d Replace calls", rec.Code, len(eng.replaced))
	}
}

// notingEngine is a fakeEngine that has something to say about each
// change, as dispatcher.Engine does.
type notingEngine struct {
	*fakeEngine
	said dispatcher.Applied
}

func (n *notingEngine) ApplyWithNotes(ctx context.Context, ops []config.Op) (dispatcher.Applied, error) {
	k, err := n.Apply(ctx, ops)
	a := n.said
	a.Ops = k
	return a, err
}

func (n *notingEngine) ReplaceWithNotes(ctx context.Context, next lb.Config, dryRun bool) (lb.Config, dispatcher.Applied, error) {
	old, err := n.Replace(ctx, next, dryRun)
	return old, n.said, err
}

// A file's change says what a change of operations says: its notes and
// warnings (a server that does not answer) reach the result.
func TestPostConfigSaysWhatTheEngineSays(t *testing.T) {
	said := dispatcher.Applied{Notes: []string{"a note"},
		Warnings: []string{"server 198.18.0.29 did not answer ARP within 1s: it takes no connections until it does"}}
	eng := &notingEngine{fakeEngine: &fakeEngine{running: running()}, said: said}
	rec := httptest.NewRecorder()
	body := "clusters:\n  - address: 198.18.0.100\n    ports:\n      - port: 80\n        servers:\n          - {address: 198.18.0.29}\n"
	New(eng, Options{}).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, api.PathConfig, strings.NewReader(body)))
	var res api.ConfigResult
	if err := json.Unmarshal(rec.Body.Bytes(), &res); rec.Code != 200 || err != nil {
		t.Fatalf("status %d (%v): %s", rec.Code, err, rec.Body)
	}
	if !reflect.DeepEqual(res.Notes, said.Notes) || !reflect.DeepEqual(res.Warnings, said.Warnings) {
		t.Errorf("notes %q, warnings %q; want %q, %q", res.Notes, res.Warnings, said.Notes, said.Warnings)
	}
}
