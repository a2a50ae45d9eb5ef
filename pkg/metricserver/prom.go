package metricserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

const (
	// DefaultPromMaxBody bounds a scrape's body (after decompression).
	DefaultPromMaxBody = 4 << 20
	// DefaultPromTimeout bounds one scrape.
	DefaultPromTimeout = 5 * time.Second
	// promAccept asks for the classic text format, the only one parsed.
	promAccept = "text/plain;version=0.0.4;q=1,*/*;q=0.1"
)

// PromQuery selects one figure from a Prometheus endpoint. Build it with
// ParsePromQuery; its String form is the metric's name in a Report.
type PromQuery struct {
	// Name is MetricCPULoad, MetricMemLoad, MetricLoadAvg (computed from
	// node_exporter's metrics) or the name of any metric family.
	Name string
	// Labels must all match a series exactly; nil for the built-ins.
	Labels map[string]string
	// Max, when positive, scales the value to value/Max×100; zero takes
	// the value as a percentage already.
	Max float64
}

// ParsePromQuery parses a query:
//
//	cpuload | memload | loadavg
//	NAME[{LABEL="VALUE",...}][/MAX]
//
// The first three are computed from node_exporter's metrics (see
// PromSource). Otherwise NAME is a metric family, the optional selector
// keeps the series whose labels have exactly these values (label values
// are quoted and escaped as in the text format: \" \\ \n), and /MAX scales
// the value to value/MAX×100. The selector must match exactly one series.
// Examples: node_load5/8, node_pressure_cpu_waiting_seconds_total/1,
// node_filesystem_avail_bytes{mountpoint="/"}/1e9.
func ParsePromQuery(s string) (PromQuery, error) {
	q, err := parsePromQuery(strings.TrimSpace(s))
	if err != nil {
		return PromQuery{}, fmt.Errorf("parsing query %q: %w", s, err)
	}
	return q, nil
}

func parsePromQuery(s string) (PromQuery, error) {
	var q PromQuery
	i := 0
	for i < len(s) && isNameByte(s[i], i == 0) {
		i++
	}
	if i == 0 {
		return q, errors.New("no metric name")
	}
	q.Name = s[:i]
	rest := s[i:]
	if strings.HasPrefix(rest, "{") {
		labels, n, err := parseSelector(rest)
		if err != nil {
			return q, err
		}
		q.Labels, rest = labels, rest[n:]
	}
	if strings.HasPrefix(rest, "/") {
		m, err := strconv.ParseFloat(rest[1:], 64)
		if err != nil || !(m > 0) || math.IsInf(m, 0) { // NaN is not > 0
			return q, fmt.Errorf("max %q is not a positive number", rest[1:])
		}
		q.Max, rest = m, ""
	}
	if rest != "" {
		return q, fmt.Errorf("unexpected %q after the metric", rest)
	}
	switch q.Name {
	case MetricCPULoad, MetricMemLoad, MetricLoadAvg:
		if q.Labels != nil || q.Max != 0 {
			return q, fmt.Errorf("%s takes no selector and no max", q.Name)
		}
	}
	return q, nil
}

// isNameByte reports whether c may appear in a metric (first: start a
// metric) name under the legacy naming rules.
func isNameByte(c byte, first bool) bool {
	return c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || !first && '0' <= c && c <= '9'
}

// parseSelector parses {l="v",...} at the start of s and returns the labels
// and the length consumed.
func parseSelector(s string) (map[string]string, int, error) {
	labels := map[string]string{}
	i := 1 // past '{'
	for {
		for i < len(s) && s[i] == ' ' {
			i++
		}
		if i < len(s) && s[i] == '}' {
			return labels, i + 1, nil
		}
		start := i
		for i < len(s) && isNameByte(s[i], i == start) && s[i] != ':' {
			i++
		}
		if i == start {
			return nil, 0, errors.New("selector: expected a label name")
		}
		name := s[start:i]
		if i+1 >= len(s) || s[i] != '=' || s[i+1] != '"' {
			return nil, 0, fmt.Errorf("selector: expected =\"value\" after %s", name)
		}
		i += 2
		var val strings.Builder
		for {
			if i >= len(s) {
				return nil, 0, errors.New("selector: unterminated label value")
			}
			c := s[i]
			i++
			if c == '"' {
				break
			}
			if c == '\\' {
				if i >= len(s) {
					return nil, 0, errors.New("selector: unterminated label value")
				}
				switch s[i] {
				case '"', '\\':
					c = s[i]
				case 'n':
					c = '\n'
				default:
					return nil, 0, fmt.Errorf("selector: unknown escape \\%c", s[i])
				}
				i++
			}
			val.WriteByte(c)
		}
		if _, dup := labels[name]; dup {
			return nil, 0, fmt.Errorf("selector: label %s given twice", name)
		}
		labels[name] = val.String()
		for i < len(s) && s[i] == ' ' {
			i++
		}
		if i < len(s) && s[i] == ',' {
			i++
		} else if i >= len(s) || s[i] != '}' {
			return nil, 0, errors.New("selector: expected , or }")
		}
	}
}

// String returns the canonical form of the query, labels sorted: the name
// of its figure in the Report of (*PromSource).Fetch.
func (q PromQuery) String() string {
	var b strings.Builder
	b.WriteString(q.Name)
	if q.Labels != nil {
		names := make([]string, 0, len(q.Labels))
		for n := range q.Labels {
			names = append(names, n)
		}
		sort.Strings(names)
		b.WriteByte('{')
		for i, n := range names {
			if i > 0 {
				b.WriteByte(',')
			}
			v := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(q.Labels[n])
			fmt.Fprintf(&b, "%s=\"%s\"", n, v)
		}
		b.WriteByte('}')
	}
	if q.Max > 0 {
		b.WriteByte('/')
		b.WriteString(strconv.FormatFloat(q.Max, 'g', -1, 64))
	}
	return b.String()
}

// PromOptions configures a PromSource.
type PromOptions struct {
	// Timeout bounds a scrape; zero means DefaultPromTimeout.
	Timeout time.Duration
	// MaxBody bounds the body read; zero means DefaultPromMaxBody. A
	// larger body is refused.
	MaxBody int64
	// Transport replaces the HTTP transport (for tests, or TLS); nil
	// means a transport of the source's own, which never uses a proxy.
	Transport http.RoundTripper
	// Source is the address scrapes leave from (see FetchOptions.Source):
	// used when the URL's host is an address of its family; the zero
	// value leaves the choice to the kernel. Ignored with Transport.
	Source netip.Addr
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// PromSource takes system metrics from a Prometheus endpoint, such as a
// node_exporter that a site already runs, so that such a backend needs no
// agent. Endpoints are the site's own and are not authenticated.
//
// It understands the text exposition format (version 0.0.4) and computes:
//
//   - cpuload from node_cpu_seconds_total: over all CPUs and between two
//     scrapes, the busy share of the time, busy being every mode except idle
//     and iowait (and guest modes, already counted in user and nice), as
//     for the agent. A CPU present in one scrape only does not count, and a
//     counter that went backwards counts as zero. The first scrape gives no
//     value yet.
//   - memload: 100 × (1 − node_memory_MemAvailable_bytes /
//     node_memory_MemTotal_bytes).
//   - loadavg: 100 × node_load1 / number of CPUs, CPUs being the distinct
//     "cpu" labels of node_cpu_seconds_total{mode="idle"}.
//   - any other family by name and selector (see ParsePromQuery): a gauge
//     (or untyped) series is taken as is, a counter as its rate per second
//     between two scrapes (none on the first); then /MAX scales it. So
//     node_pressure_cpu_waiting_seconds_total/1 is the percentage of time
//     some task waited for a CPU.
//
// Values are clamped to [0, 100], like the agent's. A PromSource keeps the
// previous scrape for the rates, so use one per endpoint; it is safe for
// concurrent use.
type PromSource struct {
	url     string
	hc      *http.Client
	timeout time.Duration
	maxBody int64
	now     func() time.Time

	mu   sync.Mutex
	prev map[string]promPrev // by query string
}

// promPrev is the previous scrape's counters for one query.
type promPrev struct {
	at     time.Time
	values map[string]float64
}

// NewPromSource returns a source scraping rawURL, an http or https URL
// such as http://10.0.0.5:9100/metrics.
func NewPromSource(rawURL string, o PromOptions) (*PromSource, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("parsing Prometheus URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("URL %q of a Prometheus endpoint is not an http or https URL with a host", rawURL)
	}
	p := &PromSource{url: u.String(), timeout: o.Timeout, maxBody: o.MaxBody, now: o.Now, prev: map[string]promPrev{}}
	if p.timeout <= 0 {
		p.timeout = DefaultPromTimeout
	}
	if p.maxBody <= 0 {
		p.maxBody = DefaultPromMaxBody
	}
	if p.now == nil {
		p.now = time.Now
	}
	rt := o.Transport
	if rt == nil {
		host, _ := netip.ParseAddr(u.Hostname())
		rt = pollTransport(nil, sourceFor(o.Source, host))
	}
	p.hc = &http.Client{Transport: rt}
	return p, nil
}

// URL returns the endpoint's URL.
func (p *PromSource) URL() string { return p.url }

// Fetch scrapes the endpoint once and evaluates the queries. The report has
// the URL as Agent, the scrape time as timestamp, no nonce and no sequence
// number; each query's String is a key in Metrics or, with the reason, in
// Missing (for instance "no value yet" on the first scrape for rates and
// cpuload). The error wraps ErrUnavailable when the scrape fails and
// ErrMalformed when the body is too large or not the text format.
func (p *PromSource) Fetch(ctx context.Context, queries []PromQuery) (Report, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	families, at, err := p.scrape(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("scraping %s: %w", p.url, err)
	}
	rep := Report{
		Version:     ReportVersion,
		Agent:       p.url,
		TimestampMS: at.UnixMilli(),
		Metrics:     map[string]float64{},
	}
	for _, q := range queries {
		key := q.String()
		v, err := p.eval(families, q, key, at)
		if err == nil {
			var ok bool
			if v, ok = clamp(v); !ok {
				err = errors.New("not a finite number")
			}
		}
		if err != nil {
			if rep.Missing == nil {
				rep.Missing = map[string]string{}
			}
			rep.Missing[key] = cut(err.Error(), MaxMissingReason)
			continue
		}
		rep.Metrics[key] = v
	}
	return rep, nil
}

// scrape fetches and parses the endpoint.
func (p *PromSource) scrape(ctx context.Context) (map[string]*dto.MetricFamily, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("making request: %w", err)
	}
	req.Header.Set("Accept", promAccept)
	resp, err := p.hc.Do(req)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, time.Time{}, refuse(ErrUnavailable, "HTTP status %s", resp.Status)
	}
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err == nil &&
		mt != "text/plain" && mt != "application/openmetrics-text" {
		return nil, time.Time{}, refuse(ErrMalformed, "content type %s is not the text format", mt)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, p.maxBody+1))
	if err != nil {
		return nil, time.Time{}, refuse(ErrUnavailable, "reading body: %v", err)
	}
	if int64(len(body)) > p.maxBody {
		return nil, time.Time{}, refuse(ErrMalformed, "body exceeds %d bytes", p.maxBody)
	}
	at := p.now()
	families, err := parsePromText(body)
	if err != nil {
		return nil, time.Time{}, err
	}
	return families, at, nil
}

// parsePromText parses the text exposition format. An OpenMetrics "# EOF"
// terminator is dropped, as the classic parser does not know it.
func parsePromText(body []byte) (map[string]*dto.MetricFamily, error) {
	if i := bytes.LastIndex(body, []byte("# EOF")); i >= 0 && len(bytes.TrimSpace(body[i+5:])) == 0 {
		body = body[:i]
	}
	// The zero TextParser panics: the validation scheme must be set.
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, refuse(ErrMalformed, "parsing text format: %v", err)
	}
	return families, nil
}

// eval computes one query from a scrape taken at.
func (p *PromSource) eval(fams map[string]*dto.MetricFamily, q PromQuery, key string, at time.Time) (float64, error) {
	switch q.Name {
	case MetricCPULoad:
		return p.promCPULoad(fams, key, at)
	case MetricMemLoad:
		avail, err := singleGauge(fams, "node_memory_MemAvailable_bytes")
		if err != nil {
			return 0, err
		}
		total, err := singleGauge(fams, "node_memory_MemTotal_bytes")
		if err != nil {
			return 0, err
		}
		if total <= 0 {
			return 0, errors.New("node_memory_MemTotal_bytes is not positive")
		}
		return 100 * (1 - avail/total), nil
	case MetricLoadAvg:
		load, err := singleGauge(fams, "node_load1")
		if err != nil {
			return 0, err
		}
		cpus := map[string]bool{}
		if mf := fams["node_cpu_seconds_total"]; mf != nil {
			for _, m := range mf.GetMetric() {
				if l := labelMap(m); l["mode"] == "idle" {
					cpus[l["cpu"]] = true
				}
			}
		}
		if len(cpus) == 0 {
			return 0, errors.New(`no node_cpu_seconds_total{mode="idle"} to count CPUs`)
		}
		return 100 * load / float64(len(cpus)), nil
	}
	return p.promSelect(fams, q, key, at)
}

// promCPULoad computes cpuload from node_cpu_seconds_total; see PromSource.
func (p *PromSource) promCPULoad(fams map[string]*dto.MetricFamily, key string, at time.Time) (float64, error) {
	mf := fams["node_cpu_seconds_total"]
	if mf == nil {
		return 0, errors.New("no node_cpu_seconds_total")
	}
	cur := cpuTimes{busy: map[string]float64{}, idle: map[string]float64{}}
	all := map[string]float64{}
	for _, m := range mf.GetMetric() {
		l := labelMap(m)
		mode := l["mode"]
		id := l["cpu"] + "/" + mode
		v := sampleValue(m)
		switch {
		case mode == "idle" || mode == "iowait":
			cur.idle[id] = v
		case strings.HasPrefix(mode, "guest"):
			continue
		default:
			cur.busy[id] = v
		}
		all[id] = v
	}
	prev, ok := p.prev[key]
	p.prev[key] = promPrev{at: at, values: all}
	if !ok {
		return 0, fmt.Errorf("%w (first scrape)", errNoValueYet)
	}
	old := cpuTimes{busy: map[string]float64{}, idle: map[string]float64{}}
	for id, v := range prev.values {
		if _, idle := cur.idle[id]; idle {
			old.idle[id] = v
		} else {
			old.busy[id] = v
		}
	}
	load, ok := busyPercent(old, cur)
	if !ok {
		return 0, errors.New("no CPU time elapsed between two scrapes")
	}
	return load, nil
}

// promSelect evaluates a query on an arbitrary family.
func (p *PromSource) promSelect(fams map[string]*dto.MetricFamily, q PromQuery, key string, at time.Time) (float64, error) {
	mf := fams[q.Name]
	if mf == nil {
		return 0, fmt.Errorf("no metric %s", q.Name)
	}
	var match []*dto.Metric
	for _, m := range mf.GetMetric() {
		l := labelMap(m)
		ok := true
		for n, v := range q.Labels {
			if l[n] != v {
				ok = false
				break
			}
		}
		if ok {
			match = append(match, m)
		}
	}
	switch {
	case len(match) == 0:
		return 0, fmt.Errorf("no series of %s matches the selector", q.Name)
	case len(match) > 1:
		return 0, fmt.Errorf("%d series of %s match; narrow the selector", len(match), q.Name)
	}
	var v float64
	switch mf.GetType() {
	case dto.MetricType_GAUGE, dto.MetricType_UNTYPED:
		v = sampleValue(match[0])
	case dto.MetricType_COUNTER:
		cur := sampleValue(match[0])
		prev, ok := p.prev[key]
		p.prev[key] = promPrev{at: at, values: map[string]float64{"": cur}}
		if !ok {
			return 0, fmt.Errorf("%w (first scrape of a counter)", errNoValueYet)
		}
		dt := at.Sub(prev.at).Seconds()
		if dt <= 0 {
			return 0, errors.New("no time elapsed between two scrapes")
		}
		d := cur - prev.values[""]
		if d < 0 { // counter reset: the new value is what accrued since
			d = cur
		}
		v = d / dt
	default:
		return 0, fmt.Errorf("%s is a %s; only gauges, counters and untyped metrics are supported",
			q.Name, strings.ToLower(mf.GetType().String()))
	}
	if q.Max > 0 {
		v = 100 * v / q.Max
	}
	return v, nil
}

// singleGauge returns the value of a family that must have one series.
func singleGauge(fams map[string]*dto.MetricFamily, name string) (float64, error) {
	mf := fams[name]
	if mf == nil || len(mf.GetMetric()) == 0 {
		return 0, fmt.Errorf("no metric %s", name)
	}
	if n := len(mf.GetMetric()); n != 1 {
		return 0, fmt.Errorf("%s has %d series, expected one", name, n)
	}
	return sampleValue(mf.GetMetric()[0]), nil
}

// sampleValue returns the value of a gauge, counter or untyped sample.
func sampleValue(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return math.NaN()
}

func labelMap(m *dto.Metric) map[string]string {
	l := make(map[string]string, len(m.GetLabel()))
	for _, lp := range m.GetLabel() {
		l[lp.GetName()] = lp.GetValue()
	}
	return l
}
