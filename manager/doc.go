// Package manager computes server weights from load, the way IBM Network
// Dispatcher's manager does.
//
// Every manager interval the engine gathers, for each server of a port, the
// executor's live counters, the advisor's and the metric server's last
// samples, and the server's current weight, and calls [Compute]. Compute is
// a pure function (time is an argument; no clock, I/O or randomness): it
// returns each server's new weight with a short reason, and whether the
// port's weights should be pushed to the executor at all. The loop that
// feeds it lives in the engine (pkg/dispatcher).
//
// Weights are proportions. The executor spreads new connections over a
// port's servers by weighted consistent hashing (pkg/maglev), so a server
// of weight 12 among weights 12, 10, 8 gets 40% of the new connections. No
// decision here ever sends "the next connection" to "the best server".
//
// # Inputs
//
// Per server, four loads (IBM's names in capitals):
//
//   - ACTV, active connections now, and NEWC, new connections since the
//     last cycle: both executor counters, live. Each is divided by the
//     server's current weight (at least 1), because the weight is what
//     brought the connections: a server of weight 20 with 200 connections
//     is exactly as loaded as one of weight 10 with 100.
//   - PORT, the advisor's load in ms.
//   - SYS, the metric server's load, 0..100 (above 100 counts as 100).
//
// An advisor or metric sample is usable when it exists (non-zero At), is a
// finite number ≥ 0, and is at most StaleIntervals (3) manager intervals
// old (or, after a clock step, that far in the future). A sample that is
// not usable is ignored, never read as zero load: the server's remaining
// inputs share its proportion (below), and the reason says "stale metric
// ignored", "no advisor load" or "bad metric ignored".
//
// # Formula
//
// Only balanced servers are computed: in service and not fixed. The others
// are decided outright: a server that is not in service (admin down,
// advisor down, quiesced) gets 0, and a fixed one its configured weight,
// capped to the weightbound.
//
// 1. Load with a noise floor. For each input k a balanced or fixed server
// in service gets v_k = load + floor_k, the floors being 1 connection per
// unit of weight, 10 ms, and 10 points of system load. The floors keep
// tiny absolute differences (3 connections against none, 0.2 ms against
// 0.6 ms, 2% CPU against 6%) from looking like huge relative ones.
//
// 2. Relative load. r_k = v_k / mean_k, mean_k being the mean v_k of the
// other in-service servers (fixed ones included) whose input k is usable.
// With no such other server, r_k = 1. Within 1e-9 of 1, r_k is exactly 1
// (rounding in the means must not move weights at equilibrium).
//
// 3. Goodness. g(r) = 3/(2+r): g(1) = 1 (as loaded as the others), g(0) =
// 1.5 = [MaxRise], g(∞) = 0. Near 1 the slope is -1/3: 10% more load than
// the others gives g ≈ 0.97.
//
// 4. Factor. F = Σ P_k·g_k / Σ P_k over the inputs with a proportion P_k >
// 0 that the server has usable; with none, F = 1 (the weight is kept).
// So a missing or stale input's proportion is shared by the server's other
// inputs in their own ratio.
//
// 5. Target. target = clamp(anchor × F, 1, weightbound), where the anchor
// is the server's configured weight (capped to the weightbound), or its
// current weight when it has none. The target is anchored to the
// operator's weight, not to the current one: equal loads bring every
// server back to its configured weight, so a server that was slow and is
// fast again gets its share back (a target relative to the current weight
// would leave it wherever its slow spell put it, since at any weight its
// load per unit of weight looks like everyone else's). The loads only
// scale the operator's weight, by at most [MaxRise] upwards: the manager
// adjusts the weights the operator gave, it does not replace them.
//
// 6. Smoothing. proposed = round(now + (target − now)/smoothing), rounded
// to the nearest integer, halves away from zero, where now is the current
// weight (a server (re)entering service with weight 0 starts from its
// configured weight, one above the weightbound from the weightbound). As
// smoothing ≥ 1, the unrounded value lies between now and target, so
// proposed lies between now and round(target), and |proposed − now| ≤
// |target − now|/smoothing + ½. When that rounds back to now although
// round(target) differs, the weight moves one unit towards its target, so
// that no weight sticks short of it (weight 1 towards 1.6 would otherwise
// never move).
//
// 7. Sensitivity. The port's change is the change its loads ask for:
//
//	Change = 100 × Σ |round(target) − now| / Σ now      (over balanced servers)
//
// that is, the share of the port's weight that the targets would move, in
// percent. IBM pushes weights "only when the total weight of the port
// changes by more than sensitivity percent"; the plain total would never
// see weight moving from one server to another, hence the sum of absolute
// changes; and it is judged on the targets, not on the smoothed step, so
// that a large wish taken in small damped steps (a server climbing back
// from weight 1 among servers of weight 20) is still followed. When Change
// > sensitivity, every balanced server's Weight is its proposed weight;
// otherwise every balanced server keeps its current one ("below
// sensitivity: kept"). Changes that do not depend on load (a server
// leaving or re-entering service, a fixed weight, a weight above the
// bound) are made either way. [Result].Push says whether any weight
// differs from the current one.
//
// The threshold is a dead band: small (and noisy) wishes are left alone. A
// lower sensitivity balances more finely at the cost of more table
// rebuilds.
//
// 8. Follow-through. The dead band decides whether a move starts, not
// where it stops: for [FollowCycles] cycles after a cycle whose Change
// passed the sensitivity, any Change above 0 is pushed too, so a server
// whose target is 4 does not stay at 5 because one unit is within the
// band. The engine carries the port's [Result].FollowThrough into the next
// cycle's [Params].FollowThrough. The follow-through ends when the targets
// are reached (Change 0) or after FollowCycles cycles without a Change
// above the sensitivity: noise on a settled port never starts a move, and
// a move lasts at most FollowCycles cycles past its last large change.
//
// # Reasons
//
// Each [ServerResult] says in a few words why its weight is what it is, for
// "dlbctl manager report": "admin down", "advisor down", "quiesced";
// "fixed weight" (", capped to weightbound 20"); "no change"; "below
// sensitivity: kept (proposed 12)"; or the input that moved the target
// most, with the server's figure and the mean of the other in-service
// servers: "higher advisor load (312 ms vs mean 80 ms)", "more active
// connections per weight (30.0 vs mean 10.0)", "lower system load (20 vs
// mean 75)"; or "back towards configured weight 10" when loads are even
// and the weight returns to the operator's. Notes follow after "; ": "back in service at configured weight
// 8", "capped to weightbound 20", "stale metric ignored", "no advisor
// load", "bad metric ignored".
//
// # Worked example
//
// Proportions 30 30 40 0, smoothing 1.5, sensitivity 5%, weightbound 20,
// three servers of weight 10 with 40 new connections each:
//
//	      ACTV  PORT   v_actv  v_port  g_actv          g_port          F      target  proposed
//	a     100   80 ms  11      90      3/(2+11/13.5)   3/(2+90/206)    1.112  11.12   11
//	b     100   80 ms  11      90      (as a)          (as a)          1.112  11.12   11
//	c     150   312 ms 16      322     3/(2+16/11)     3/(2+322/90)    0.776   7.76    9
//
// (NEWC per weight is 4+1 = 5 for all: g_new = 1.) For a: 11/13.5 = 0.815
// gives g = 1.066; 90/206 = 0.437 gives 1.231; F = (30×1.066 + 30×1 +
// 40×1.231)/100 = 1.112. Its proposed weight is round(10 + 1.12/1.5) =
// round(10.75) = 11. For c, F = (30×0.868 + 30 + 40×0.538)/100 = 0.776 and
// round(10 − 2.24/1.5) = round(8.504) = 9. Change = (1+1+2)/30 = 13.3% > 5%:
// pushed; c, whose rounded target is 8, gets there next cycle. c's reason:
// "higher advisor load (312 ms vs mean 80 ms)".
//
// # Properties
//
// Each is checked by a property test (rapid) in this package.
//
//  1. More load never raises a weight. Every step is non-decreasing in the
//     server's own load, also in floating point: v_k is a monotone
//     function of the load; mean_k is the sum of the servers before it plus
//     the sum of those after it, so it does not involve its own load at
//     all; g, the weighted sum, the clamp, the smoothing and the rounding
//     are monotone. So target and proposed never rise with the server's
//     own ACTV, NEWC, PORT or SYS. (The final Weight also depends on the
//     port-wide sensitivity decision, which more load on one server can
//     flip either way; with sensitivity 0 Weight is always the proposed
//     weight and the property holds for it too.)
//  2. Bounds. A balanced server's weight is in 1..weightbound; a server not
//     in service gets 0; a fixed one its configured weight capped to
//     0..weightbound.
//  3. Determinism and equilibrium. There is no state, clock or randomness.
//     When every in-service server has the same loads (per unit of weight
//     for connections), every r_k is 1, F = 1 and target = the configured
//     weight: servers at their configured weights keep them (unchanged
//     inputs, unchanged weights), others move back towards theirs.
//  4. Smoothing. proposed lies between now and round(target) and moves at
//     most |target − now|/smoothing + ½ (the rounding), or one unit when
//     that would not move it although round(target) differs.
//  5. Sensitivity. When Change ≤ sensitivity, balanced servers keep their
//     current weights; otherwise they take the proposed ones.
//  6. Connections per unit of weight. Scaling a server's weight and its
//     connection counts by the same factor changes neither its own factor
//     F nor any server's target (its own included, when anchored to a
//     configured weight): a heavily weighted server is not punished for
//     its own share.
//
// # Never herd (seed 000)
//
// The failure in seed 000 is a balancer that sends every new request to
// the server whose (stale) load looks lowest, so the whole surge lands on
// one server, then the next. Here:
//
//   - Nothing is chosen: weights are proportions, and consistent hashing
//     spreads new connections over all servers in service in their ratio.
//     The best-looking server gets a larger share, never all of it.
//   - However much better a server looks, its target is at most MaxRise
//     (1.5) × its configured weight and at most the weightbound, and smoothing
//     takes only 1/smoothing of that step per cycle: from weight 10, one
//     cycle (smoothing 1.5) raises a server to 13 at most, whatever its
//     figures. Falls are fast (an overloaded server's target can drop to 1
//     at once): shedding load is safe, piling it on is not.
//   - Small differences stay small: the floors damp tiny absolute
//     differences, the gain near equilibrium is 1/3 (and 1/smoothing of
//     that per cycle), and changes under the sensitivity threshold are not
//     pushed at all.
//   - Stale figures are not acted on: samples older than three intervals
//     are ignored, and the live executor counters (seed 001's "hit adds")
//     show a surge to the next cycle: a server that took many new
//     connections per unit of weight loses weight even while its advisor
//     still reports the fast response of a few seconds ago.
package manager
