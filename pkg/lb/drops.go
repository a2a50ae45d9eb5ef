package lb

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// DropCauses says, for each of the executor's drop reasons that mean it
// cannot forward what it should (the ones the dispatcher watches), what
// it lacked.
var DropCauses = map[string]string{
	"drop_no_route":      "no route to the client",
	"drop_no_tx_port":    "no usable interface towards the server",
	"drop_table_full":    "the NAT tables full",
	"drop_nat_exhausted": "no free NAT port on the return address",
}

// DroppingText renders what the executor dropped over the last period, by
// reason: "120 packets in the last 5 s: 100 with no route to the client
// (drop_no_route), 20 with ...". dlbctl and the console say it alike.
func DroppingText(m map[string]uint64, over time.Duration) string {
	var total uint64
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(m)) {
		total += m[r]
		cause := DropCauses[r]
		if cause == "" {
			cause = "another cause"
		}
		parts = append(parts, fmt.Sprintf("%d with %s (%s)", m[r], cause, r))
	}
	unit := "packets"
	if total == 1 {
		unit = "packet"
	}
	return fmt.Sprintf("%d %s in the last %.0f s: %s", total, unit, over.Seconds(), strings.Join(parts, ", "))
}
