// Package e2e holds dlb's end-to-end tests: they build a lab of network
// namespaces with scripts/lab.sh, run the real dlbd, dlbctl and the lab's
// HTTP backends and load generator, and move real TCP through the cluster
// address. It has no code of its own outside the tests. The tests need root
// (they skip without it, and fail under DLB_REQUIRE_PRIVILEGED=1).
package e2e
