package dispatcher

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// maxLogLines bounds the info lines one change logs one by one about
// the operations or objects it touched: a batch of 4,000 announced
// clusters logged 16,000 lines in 8 s, and journald drops a service's
// lines past its rate limit (10,000 in 30 s, more with free disk
// space), the warnings that follow included. Past it, one line sums
// them up and each has its line at debug level.
const maxLogLines = 100

// summedNames is how many of the items a summary line names.
const summedNames = 8

// logEach logs msg at info level for each of n items, with the
// attributes attrs gives, or, for more than maxLogLines items, once with
// their count and the first few names, and each at debug level.
func logEach(log *slog.Logger, msg string, n int, attrs func(i int) []any, name func(i int) string, summary ...any) {
	if n <= maxLogLines {
		for i := range n {
			log.Info(msg, attrs(i)...)
		}
		return
	}
	names := make([]string, 0, summedNames)
	for i := range min(n, summedNames) {
		names = append(names, name(i))
	}
	first := strings.Join(names, ", ")
	if n > summedNames {
		first += fmt.Sprintf(", … (%d in all)", n)
	}
	log.Info(msg, append([]any{"count", n, "first", first, "each", "at debug level"}, summary...)...)
	if !log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	for i := range n {
		log.Debug(msg, attrs(i)...)
	}
}
