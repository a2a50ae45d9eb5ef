//go:build linux

package datapath

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// benchLoadRounds is how many times TestBenchLoad loads each object.
const benchLoadRounds = 9

var (
	verificationTime = regexp.MustCompile(`verification time (\d+) usec`)
	processedInsns   = regexp.MustCompile(`processed (\d+) insns`)
)

// TestBenchLoad measures what loading the executor costs the kernel: the
// time its verifier reports for each program (most of dlbd's start, and
// of every test that opens an executor) and the instructions it
// processed, for the committed object and any others DLB_BENCH_LOAD names
// (comma-separated .o files; "-" is the committed one), each sized as Open
// sizes it (benchSpec) and loaded in turn, benchLoadRounds times. Opt-in:
// DLB_BENCH_LOAD=- for the committed object alone.
func TestBenchLoad(t *testing.T) {
	list := os.Getenv("DLB_BENCH_LOAD")
	if list == "" {
		t.Skip("measuring the executor's load: set DLB_BENCH_LOAD=- (or a.o,b.o; - is the committed object)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("loading the executor needs root")
	}
	names := strings.Split(list, ",")
	type sample struct {
		load, verify time.Duration
		insns        int
	}
	got := make([][]sample, len(names))
	for round := 0; round < benchLoadRounds; round++ {
		for i, name := range names {
			spec := benchSpec(t, name)
			for _, m := range spec.Maps {
				m.Pinning = ebpf.PinNone
			}
			start := time.Now()
			coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
				Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats},
			})
			if err != nil {
				t.Fatalf("%s: loading: %v", name, err)
			}
			s := sample{load: time.Since(start)}
			for _, p := range coll.Programs {
				if m := verificationTime.FindStringSubmatch(p.VerifierLog); m != nil {
					us, _ := strconv.Atoi(m[1])
					s.verify += time.Duration(us) * time.Microsecond
				}
				if m := processedInsns.FindStringSubmatch(p.VerifierLog); m != nil {
					n, _ := strconv.Atoi(m[1])
					s.insns += n
				}
			}
			coll.Close()
			if s.verify == 0 || s.insns == 0 {
				t.Fatalf("%s: no verifier statistics in the programs' logs", name)
			}
			got[i] = append(got[i], s)
		}
	}
	median := func(ss []sample, f func(sample) time.Duration) (med, lo, hi time.Duration) {
		v := make([]time.Duration, len(ss))
		for i, s := range ss {
			v[i] = f(s)
		}
		slices.Sort(v)
		return v[len(v)/2], v[0], v[len(v)-1]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "executor load, %d rounds, objects in turn (medians, min–max):\n", benchLoadRounds)
	fmt.Fprintf(&b, "%-32s %22s %22s %12s\n", "object", "load (all programs)", "verifier's time", "insns")
	for i, name := range names {
		if name == "-" {
			name = "committed object"
		}
		lm, ll, lh := median(got[i], func(s sample) time.Duration { return s.load })
		vm, vl, vh := median(got[i], func(s sample) time.Duration { return s.verify })
		fmt.Fprintf(&b, "%-32s %8v (%v–%v) %8v (%v–%v) %12d\n", name,
			lm.Round(time.Millisecond), ll.Round(time.Millisecond), lh.Round(time.Millisecond),
			vm.Round(time.Millisecond), vl.Round(time.Millisecond), vh.Round(time.Millisecond), got[i][0].insns)
	}
	t.Log("\n" + b.String())
}

// TestBenchRestart measures what a restart's Open costs: with the pinned
// program of another build, which Open loads (and the verifier checks)
// again, and with the same build, which Open adopts. Each round opens a
// new build (a buildSalt of its own) over the pins, then opens the same
// build again, closing each (pins kept). Opt-in like TestBenchLoad:
// DLB_BENCH_LOAD set.
func TestBenchRestart(t *testing.T) {
	if os.Getenv("DLB_BENCH_LOAD") == "" {
		t.Skip("measuring a restart's Open: set DLB_BENCH_LOAD=-")
	}
	if os.Geteuid() != 0 {
		t.Fatal("loading the executor needs root")
	}
	pinDir := newPinDir(t)
	t.Cleanup(func() {
		buildSalt = ""
		if _, err := RemovePins(pinDir); err != nil {
			t.Error(err)
		}
	})
	open := func(wantAdopted bool) time.Duration {
		start := time.Now()
		dp, err := Open(Options{PinDir: pinDir})
		took := time.Since(start)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		if adopted, why := dp.ProgramAdopted(); adopted != wantAdopted {
			t.Fatalf("Open adopted %v (%s), want %v", adopted, why, wantAdopted)
		}
		if err := dp.Close(); err != nil {
			t.Fatal(err)
		}
		return took
	}
	var loaded, adopted []time.Duration
	for round := 0; round < benchLoadRounds; round++ {
		buildSalt = fmt.Sprintf("bench round %d", round)
		loaded = append(loaded, open(false))
		adopted = append(adopted, open(true))
	}
	slices.Sort(loaded)
	slices.Sort(adopted)
	l, a := loaded[len(loaded)/2], adopted[len(adopted)/2]
	t.Logf("restart's Open, %d rounds (medians, min–max): another build, loaded %v (%v–%v); the same build, adopted %v (%v–%v): %.1f× faster",
		benchLoadRounds, l.Round(time.Millisecond), loaded[0].Round(time.Millisecond), loaded[len(loaded)-1].Round(time.Millisecond),
		a.Round(time.Millisecond), adopted[0].Round(time.Millisecond), adopted[len(adopted)-1].Round(time.Millisecond),
		float64(l)/float64(a))
}
