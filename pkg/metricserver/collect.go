package metricserver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/procfs"
)

// errNoValueYet is the reason for a figure that needs two samples (CPU
// load) before the second one has been taken.
var errNoValueYet = errors.New("no value yet: needs two samples")

// cpuTimes is the part of one CPU's (or all CPUs') time accounting that the
// load computation uses, in any unit common to all fields.
type cpuTimes struct {
	// busy and idle are keyed by mode (and CPU, for node_exporter data),
	// so that a delta is taken per counter: one that goes backwards
	// (iowait does on some kernels) then only loses its own contribution.
	busy, idle map[string]float64
}

// procCPUTimes splits a /proc/stat CPU line into busy and idle modes.
//
// Idle time is idle + iowait: a CPU waiting for I/O is free to run other
// work, so iowait is not load (top and node_exporter's usual "busy" query
// agree). Busy time is user + nice + system + irq + softirq + steal: steal
// is time the hypervisor gave to someone else, which the backend could not
// use either. guest and guest_nice are left out because the kernel already
// counts them in user and nice.
func procCPUTimes(s procfs.CPUStat) cpuTimes {
	return cpuTimes{
		busy: map[string]float64{
			"user": s.User, "nice": s.Nice, "system": s.System,
			"irq": s.IRQ, "softirq": s.SoftIRQ, "steal": s.Steal,
		},
		idle: map[string]float64{"idle": s.Idle, "iowait": s.Iowait},
	}
}

// busyPercent returns the busy share of the time elapsed between two
// samples, in percent. Only counters present in both samples count (a CPU
// brought online in between does not add its whole history), and one that
// went backwards counts as zero. It reports false when no time elapsed, as
// between identical samples.
func busyPercent(prev, cur cpuTimes) (float64, bool) {
	delta := func(p, c map[string]float64) float64 {
		var sum float64
		for key, v := range c {
			if pv, ok := p[key]; ok && v > pv {
				sum += v - pv
			}
		}
		return sum
	}
	busy := delta(prev.busy, cur.busy)
	total := busy + delta(prev.idle, cur.idle)
	if total <= 0 {
		return 0, false
	}
	return 100 * busy / total, true
}

// cpuSampler samples /proc/stat periodically and keeps the CPU load over
// the latest interval: one reading of the counters is not a load, the
// difference between two is.
type cpuSampler struct {
	fs procfs.FS

	mu      sync.Mutex
	prev    *cpuTimes // the latest sample
	load    float64   // load between the two latest samples
	loadAt  time.Time // when load was computed; zero: no value yet
	lastErr error     // error of the latest sample, if it failed
}

func newCPUSampler(fs procfs.FS) *cpuSampler { return &cpuSampler{fs: fs} }

// sample reads /proc/stat once and, from the second sample on, updates the
// load.
func (s *cpuSampler) sample(now time.Time) error {
	st, err := s.fs.Stat()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.lastErr = fmt.Errorf("reading stat: %w", err)
		return s.lastErr
	}
	s.lastErr = nil
	cur := procCPUTimes(st.CPUTotal)
	if s.prev != nil {
		if load, ok := busyPercent(*s.prev, cur); ok {
			s.load, s.loadAt = load, now
		}
	}
	s.prev = &cur
	return nil
}

// run samples every interval until ctx is done.
func (s *cpuSampler) run(ctx context.Context, interval time.Duration, now func() time.Time) {
	_ = s.sample(now())
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = s.sample(now())
		}
	}
}

// value returns the latest CPU load. It fails before the second sample,
// when the latest sample failed, and when the latest value is older than
// maxAge (the sampler stopped).
func (s *cpuSampler) value(now time.Time, maxAge time.Duration) (float64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.lastErr != nil:
		return 0, s.lastErr
	case s.loadAt.IsZero():
		return 0, errNoValueYet
	case now.Sub(s.loadAt) > maxAge:
		return 0, fmt.Errorf("latest CPU sample is %s old: sampler not running", now.Sub(s.loadAt).Round(time.Millisecond))
	}
	return s.load, nil
}

// memLoad returns 100 × (1 − MemAvailable/MemTotal) from /proc/meminfo.
func memLoad(fs procfs.FS) (float64, error) {
	mi, err := fs.Meminfo()
	if err != nil {
		return 0, fmt.Errorf("reading meminfo: %w", err)
	}
	switch {
	case mi.MemTotal == nil || *mi.MemTotal == 0:
		return 0, errors.New("meminfo has no MemTotal")
	case mi.MemAvailable == nil:
		return 0, errors.New("meminfo has no MemAvailable (kernel older than 3.14)")
	}
	return 100 * (1 - float64(*mi.MemAvailable)/float64(*mi.MemTotal)), nil
}

// loadAvgLoad returns 100 × load1 / number of CPUs, the CPUs being those
// listed in /proc/stat (the online ones, as node_exporter counts them).
func loadAvgLoad(fs procfs.FS) (float64, error) {
	la, err := fs.LoadAvg()
	if err != nil {
		return 0, fmt.Errorf("reading loadavg: %w", err)
	}
	st, err := fs.Stat()
	if err != nil {
		return 0, fmt.Errorf("reading stat: %w", err)
	}
	if len(st.CPU) == 0 {
		return 0, errors.New("stat lists no CPUs")
	}
	return 100 * la.Load1 / float64(len(st.CPU)), nil
}
