package main

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/server"
)

func TestRequestSizeFor(t *testing.T) {
	for _, c := range []struct {
		maxServers, maxPorts uint32
		want                 int64
	}{
		{1, 1, server.DefaultMaxRequestSize},
		{16383, 4095, 12 << 20}, // the defaults: 16,384 x 512 + 4,096 x 1,024 bytes
		{131071, 4095, 68 << 20},
		{1<<24 - 1, 4095, 512 << 20}, // the most --max-servers allows: capped
	} {
		if got := requestSizeFor(c.maxServers, c.maxPorts); got != c.want {
			t.Errorf("requestSizeFor(%d, %d) = %d, want %d", c.maxServers, c.maxPorts, got, c.want)
		}
	}
}

// TestWholeConfigurationFits: the configuration file of an executor filled
// with the longest servers there are without per-server advisor requests
// (IPv6, NAT with a return address, a router and a mapped port, every flag
// set), in YAML and in JSON, fits in the request limit that its
// --max-servers gives, so that "dlbctl get | dlbctl apply -f -" works on
// any configuration dlbd can hold.
func TestWholeConfigurationFits(t *testing.T) {
	for _, c := range []struct{ ports, perPort int }{{1, 1}, {1, 16383}, {16383, 1}, {64, 256}} {
		t.Run(fmt.Sprintf("%d x %d", c.ports, c.perPort), func(t *testing.T) {
			cfg := lb.NewConfig()
			cl := lb.Cluster{Address: netip.MustParseAddr("2001:2:ffff:ffff:ffff:ffff:ffff:ff00"), Configure: true}
			n := 0
			for p := range c.ports {
				port := lb.Port{Number: uint16(1 + p%65535), Protocol: lb.TCP, Method: lb.NAT, StickyTime: 3600, StaleTimeout: 86400, WeightBound: 100}
				for range c.perPort {
					a := netip.MustParseAddr(fmt.Sprintf("2001:2:ffff:ffff:ffff:ffff:%04x:%04x", n>>16, n&0xffff))
					n++
					port.Servers = append(port.Servers, lb.Server{Address: a, Weight: 100, Down: true, Quiesced: true, FixedWeight: true,
						MapPort: 65535, ReturnAddress: netip.MustParseAddr("2001:2:ffff:ffff:ffff:ffff:ffff:fff1"),
						Router: netip.MustParseAddr("2001:2:ffff:ffff:ffff:ffff:ffff:fff2")})
				}
				cl.Ports = append(cl.Ports, port)
			}
			cfg.Clusters = []lb.Cluster{cl}
			limit := requestSizeFor(uint32(n-1), uint32(c.ports-1))
			for name, marshal := range map[string]func(lb.Config) ([]byte, error){"YAML": config.MarshalFile, "JSON": config.MarshalFileJSON} {
				b, err := marshal(cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s: %d bytes, %.0f per server; limit %d", name, len(b), float64(len(b))/float64(n), limit)
				if int64(len(b)) > limit {
					t.Errorf("%s of %d servers: %d bytes, more than the request limit %d of --max-servers %d --max-ports %d", name, n, len(b), limit, n-1, c.ports-1)
				}
			}
		})
	}
}
