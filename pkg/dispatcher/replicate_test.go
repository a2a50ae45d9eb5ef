package dispatcher

import (
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/lb"
)

// TestRefreshFor: an unchanged entry is sent again often enough that the
// standby never expires what the active still uses, whatever the ports'
// timeouts.
func TestRefreshFor(t *testing.T) {
	cfg := func(fin uint32, ports ...lb.Port) lb.Config {
		return lb.Config{Executor: lb.Executor{FinTimeout: fin}, Clusters: []lb.Cluster{{Ports: ports}}}
	}
	for _, tc := range []struct {
		name string
		cfg  lb.Config
		want time.Duration
	}{
		{"defaults", cfg(lb.DefaultFinTimeout, lb.Port{StaleTimeout: lb.DefaultStaleTimeout}), replicateRefresh},
		{"no ports", cfg(lb.DefaultFinTimeout), replicateRefresh},
		{"short staletimeout", cfg(60, lb.Port{StaleTimeout: 300}, lb.Port{StaleTimeout: 6}), 2 * time.Second},
		{"short stickytime", cfg(60, lb.Port{StaleTimeout: 300, StickyTime: 9}), 3 * time.Second},
		{"short fintimeout", cfg(3, lb.Port{StaleTimeout: 300}), time.Second},
		{"the shortest timeout possible", cfg(60, lb.Port{StaleTimeout: 1}), time.Second / 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := refreshFor(tc.cfg); got != tc.want {
				t.Errorf("refreshFor = %v, want %v", got, tc.want)
			}
		})
	}
}
