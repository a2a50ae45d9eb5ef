package events

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
)

// TestRecentAndCounts: every event is counted by name, and Recent keeps the
// latest RecentEvents of them, oldest first, however many were raised.
func TestRecentAndCounts(t *testing.T) {
	tests := []struct {
		name      string
		emit      int
		wantFirst int // index of the oldest event Recent still holds
	}{
		{"none", 0, 0},
		{"a few", 3, 0},
		{"exactly full", RecentEvents, 0},
		{"wrapped once", RecentEvents + 7, 7},
		{"wrapped many times", 3*RecentEvents + 1, 2*RecentEvents + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New("", 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
			for i := range tt.emit {
				name := ServerDown
				if i%2 == 1 {
					name = ServerUp
				}
				r.Emit(name, map[string]string{"I": fmt.Sprint(i)})
			}
			c := r.Counts()
			if got := c[ServerDown] + c[ServerUp]; got != uint64(tt.emit) {
				t.Errorf("counted %d events, want %d (%v)", got, tt.emit, c)
			}
			if c[ServerDown] != uint64((tt.emit+1)/2) {
				t.Errorf("serverDown counted %d, want %d", c[ServerDown], (tt.emit+1)/2)
			}
			rec := r.Recent()
			if want := min(tt.emit, RecentEvents); len(rec) != want {
				t.Fatalf("Recent holds %d, want %d", len(rec), want)
			}
			for j, e := range rec {
				if want := fmt.Sprint(tt.wantFirst + j); e.Env["I"] != want {
					t.Fatalf("Recent[%d] is event %s, want %s", j, e.Env["I"], want)
				}
				if j > 0 && e.At.Before(rec[j-1].At) {
					t.Fatalf("Recent[%d] is older than the one before", j)
				}
			}
		})
	}
}
