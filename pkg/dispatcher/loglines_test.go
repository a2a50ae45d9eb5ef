package dispatcher

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// TestLogEach: up to maxLogLines items get an info line each; more get
// one info line with their count and first names, and each its line at
// debug level when that is on.
func TestLogEach(t *testing.T) {
	tests := []struct {
		name      string
		n         int
		level     slog.Level
		wantInfo  int
		wantDebug int
		wantFirst string
	}{
		{"none", 0, slog.LevelInfo, 0, 0, ""},
		{"one", 1, slog.LevelInfo, 1, 0, ""},
		{"at the bound", maxLogLines, slog.LevelInfo, maxLogLines, 0, ""},
		{"past the bound", maxLogLines + 1, slog.LevelInfo, 1, 0,
			`first="c0, c1, c2, c3, c4, c5, c6, c7, … (101 in all)"`},
		{"past the bound, debug on", 4000, slog.LevelDebug, 1, 4000,
			`first="c0, c1, c2, c3, c4, c5, c6, c7, … (4000 in all)"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b testutil.LogBuffer
			log := slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: tt.level}))
			logEach(log, "cluster address announced", tt.n, func(i int) []any { return []any{"cluster", fmt.Sprintf("c%d", i)} },
				func(i int) string { return fmt.Sprintf("c%d", i) }, "reason", "why")
			var info, debug []string
			for l := range strings.SplitSeq(strings.TrimSpace(b.String()), "\n") {
				switch {
				case strings.Contains(l, "level=INFO"):
					info = append(info, l)
				case strings.Contains(l, "level=DEBUG"):
					debug = append(debug, l)
				}
			}
			if len(info) != tt.wantInfo || len(debug) != tt.wantDebug {
				t.Fatalf("%d info and %d debug lines, want %d and %d", len(info), len(debug), tt.wantInfo, tt.wantDebug)
			}
			if tt.wantFirst == "" {
				if tt.n > 0 && !strings.Contains(info[tt.n-1], fmt.Sprintf("cluster=c%d", tt.n-1)) {
					t.Errorf("the last line %q does not name its item", info[tt.n-1])
				}
				return
			}
			for _, want := range []string{fmt.Sprintf("count=%d", tt.n), tt.wantFirst, "reason=why"} {
				if !strings.Contains(info[0], want) {
					t.Errorf("summary %q lacks %s", info[0], want)
				}
			}
			if tt.wantDebug > 0 && !strings.Contains(debug[tt.wantDebug-1], fmt.Sprintf("cluster=c%d", tt.n-1)) {
				t.Errorf("the last debug line %q does not name its item", debug[tt.wantDebug-1])
			}
		})
	}
}

// TestOpCounts: a batch is summed up by object and action, in the order
// they first appear.
func TestOpCounts(t *testing.T) {
	ops := []config.Op{
		{Object: config.Cluster, Action: config.Add}, {Object: config.Port, Action: config.Add},
		{Object: config.Cluster, Action: config.Add}, {Object: config.Server, Action: config.Add},
		{Object: config.Port, Action: config.Add}, {Object: config.Cluster, Action: config.Remove},
	}
	if got, want := opCounts(ops), "2 cluster add, 2 port add, 1 server add, 1 cluster remove"; got != want {
		t.Errorf("opCounts = %q, want %q", got, want)
	}
}
