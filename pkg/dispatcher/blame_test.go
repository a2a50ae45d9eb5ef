package dispatcher

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/lb"
)

// TestHopRefusalNamesTheOperation: a batch refused for a next hop the
// host cannot reach names the server that brings it in, the first in the
// configuration's order, and the operation that added it, so that
// "dlbctl file load" and "dlbctl apply -f" can name its line in a script
// of 10,000 servers. A client gateway, a field of the executor's, names
// the last executor operation.
func TestHopRefusalNamesTheOperation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ops   []config.Op
		field string
		obj   string
		index int
	}{
		{name: "a server", ops: []config.Op{
			op("server", "add", vip+"@443@198.18.0.40"),
			op("cluster", "add", "198.18.0.101"),
			op("server", "add", vip+"@80@198.18.0.41"),
		}, field: "server", obj: vip + "@80@198.18.0.41", index: 2},
		{name: "a NAT server's router", ops: []config.Op{
			op("port", "add", vip+"@82", "method", "nat"),
			op("server", "add", vip+"@82@198.18.1.5", "returnaddress", "198.18.0.9", "router", "198.18.0.250"),
			op("cluster", "add", "198.18.0.101"),
		}, field: "router", obj: vip + "@82@198.18.1.5", index: 1},
		{name: "a client gateway", ops: []config.Op{
			op("executor", "set", "", "clientgateway", "198.18.0.250"),
			op("cluster", "add", "198.18.0.101"),
		}, field: "clientgateway", obj: "198.18.0.250", index: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, t.TempDir())
			base(h)
			h.nif.mu.Lock()
			for _, a := range []string{"198.18.0.40", "198.18.0.41", "198.18.0.250"} {
				h.nif.offLink[netip.MustParseAddr(a)] = true
			}
			h.nif.mu.Unlock()
			for range 5 { // the same one every time
				err := h.apply(tc.ops...)
				var oe *config.OpError
				var fe *lb.FieldError
				if !errors.As(err, &oe) || !errors.As(err, &fe) {
					t.Fatalf("error %v, want a refusal naming an operation and a field", err)
				}
				if fe.Field != tc.field || fe.Object != tc.obj || oe.Index != tc.index {
					t.Fatalf("refused: field %q, object %q, operation %d (%v); want %q, %q, %d",
						fe.Field, fe.Object, oe.Index, err, tc.field, tc.obj, tc.index)
				}
			}
		})
	}
}
