package metricserver

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Wire constants of the Metric Server protocol, version 1. See the package
// documentation for what each one means on the wire.
const (
	// DefaultPort is the TCP port an agent listens on unless told
	// otherwise; it is IBM Metric Server's port.
	DefaultPort = 10004
	// ReportPath is the only HTTP path an agent answers.
	ReportPath = "/v1/report"
	// NonceParam is the query parameter that carries the client's nonce.
	NonceParam = "nonce"
	// SignatureHeader is the response header that carries the report's
	// HMAC-SHA256 signature, as lowercase hex.
	SignatureHeader = "X-Dlb-Signature"
	// ReportVersion is the value of the report's "version" field.
	ReportVersion = 1
	// MaxReportSize is the largest response body a client accepts, in
	// bytes; larger bodies are refused as malformed.
	MaxReportSize = 64 << 10
	// MinNonceLen and MaxNonceLen bound the length of a nonce, in
	// characters of the base64url alphabet (A-Z a-z 0-9 - _).
	MinNonceLen = 16
	MaxNonceLen = 128
	// MinSecretLen is the shortest shared secret accepted, in bytes.
	MinSecretLen = 16
	// MaxMissingReason is the longest reason an agent puts in "missing";
	// longer ones are cut.
	MaxMissingReason = 256
)

// Names of the built-in metrics. A script with one of these names in the
// agent's scripts directory replaces the built-in collector.
const (
	// MetricCPULoad is the busy share of all CPUs over the last sampling
	// interval, in percent (IBM's "cpuload").
	MetricCPULoad = "cpuload"
	// MetricMemLoad is 100 × (1 − MemAvailable/MemTotal) (IBM's
	// "memload").
	MetricMemLoad = "memload"
	// MetricLoadAvg is 100 × load1 / number of CPUs, capped at 100.
	MetricLoadAvg = "loadavg"
)

// Reasons a client refuses a report. Every error returned by
// (*Client).Fetch for a refused report wraps exactly one of them, so callers
// branch with errors.Is; the Client also counts refusals by reason (see
// Counters).
var (
	// ErrUnauthenticated: the signature header is missing, is not hex, or
	// does not match HMAC-SHA256(secret, body).
	ErrUnauthenticated = errors.New("unauthenticated report")
	// ErrReplayed: the report is authentic but not an answer to this
	// request (its nonce is not the one sent), or its sequence number did
	// not increase since the last report accepted from that agent.
	ErrReplayed = errors.New("replayed report")
	// ErrMalformed: the body is larger than MaxReportSize, is not JSON,
	// lacks a required field, has a field of the wrong type, or has an
	// unknown version.
	ErrMalformed = errors.New("malformed report")
	// ErrOutOfRange: a metric value is not a finite number in [0, 100].
	ErrOutOfRange = errors.New("metric value out of range")
	// ErrStale: the report's timestamp is further than the allowed skew
	// from the client's clock (in either direction).
	ErrStale = errors.New("stale report")
	// ErrUnavailable: no report was received: the agent could not be
	// reached, timed out, or answered with an HTTP status other than 200.
	ErrUnavailable = errors.New("agent unavailable")
)

// Report is one load report of an agent (or of a Prometheus endpoint, see
// PromSource). Its JSON encoding is the wire format; see the package
// documentation.
type Report struct {
	// Version is ReportVersion.
	Version int `json:"version"`
	// Agent names the reporting host (the agent's --name, by default its
	// host name), for logs and reports only: it is not authenticated
	// separately from the rest of the report.
	Agent string `json:"agent"`
	// Nonce is the client's nonce, echoed; empty in the unsigned reports
	// of (*Agent).Collect and (*PromSource).Fetch.
	Nonce string `json:"nonce,omitempty"`
	// Seq is the agent's sequence number; it increases with every report.
	// Zero where Nonce is empty.
	Seq uint64 `json:"seq,omitempty"`
	// TimestampMS is when the figures were collected, in milliseconds
	// since the Unix epoch, by the agent's clock.
	TimestampMS int64 `json:"timestamp_ms"`
	// Metrics maps a metric name to its value in [0, 100].
	Metrics map[string]float64 `json:"metrics"`
	// Missing maps the name of a metric that could not be collected to
	// the reason, so that a missing figure is never silently zero.
	Missing map[string]string `json:"missing,omitempty"`
}

// Time returns the report's timestamp.
func (r Report) Time() time.Time { return time.UnixMilli(r.TimestampMS) }

// Age returns how old the report's figures are at now. It is negative when
// the report's timestamp is ahead of now. The manager ignores figures older
// than a few of its intervals.
func (r Report) Age(now time.Time) time.Duration { return now.Sub(r.Time()) }

// Sign returns the signature of a report body: the lowercase hex of
// HMAC-SHA256(secret, body). It is the value of the SignatureHeader.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// verifySignature reports whether sig (the header value) is the signature
// of body under secret, in constant time.
func verifySignature(secret, body []byte, sig string) bool {
	got, err := hex.DecodeString(sig)
	if err != nil || len(got) != sha256.Size {
		return false
	}
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return hmac.Equal(got, m.Sum(nil))
}

// validNonce reports whether s is a well-formed nonce.
func validNonce(s string) bool {
	if len(s) < MinNonceLen || len(s) > MaxNonceLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// metricNameRE is the syntax of an agent metric name (and so of a script's
// file name).
var metricNameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$`)

// ValidMetricName reports whether name can name an agent metric: 1 to 64
// characters of A-Z a-z 0-9 _ . -, not starting with '.' or '-'.
func ValidMetricName(name string) bool { return metricNameRE.MatchString(name) }

// wireReport is the decoding form of Report: pointers tell a missing field
// from a zero one, and metric values stay raw so that a non-number can be
// told from an out-of-range number.
type wireReport struct {
	Version     *int                       `json:"version"`
	Agent       string                     `json:"agent"`
	Nonce       *string                    `json:"nonce"`
	Seq         *uint64                    `json:"seq"`
	TimestampMS *int64                     `json:"timestamp_ms"`
	Metrics     map[string]json.RawMessage `json:"metrics"`
	Missing     map[string]string          `json:"missing"`
}

// errDetail carries one refusal reason and its detail.
type errDetail struct {
	reason error
	detail string
}

func (e *errDetail) Error() string { return e.reason.Error() + ": " + e.detail }
func (e *errDetail) Unwrap() error { return e.reason }

func refuse(reason error, format string, args ...any) error {
	return &errDetail{reason: reason, detail: fmt.Sprintf(format, args...)}
}

// parseReport decodes a report body whose signature has already been
// verified and checks its structure; errors wrap ErrMalformed. Metric
// values are checked by checkValues, after the report is known to be fresh.
func parseReport(body []byte) (Report, map[string]json.RawMessage, error) {
	var w wireReport
	if err := json.Unmarshal(body, &w); err != nil {
		return Report{}, nil, refuse(ErrMalformed, "decoding JSON: %v", err)
	}
	switch {
	case w.Version == nil:
		return Report{}, nil, refuse(ErrMalformed, `missing field "version"`)
	case *w.Version != ReportVersion:
		return Report{}, nil, refuse(ErrMalformed, "unsupported version %d", *w.Version)
	case w.Nonce == nil:
		return Report{}, nil, refuse(ErrMalformed, `missing field "nonce"`)
	case w.Seq == nil:
		return Report{}, nil, refuse(ErrMalformed, `missing field "seq"`)
	case w.TimestampMS == nil:
		return Report{}, nil, refuse(ErrMalformed, `missing field "timestamp_ms"`)
	case *w.TimestampMS <= 0:
		return Report{}, nil, refuse(ErrMalformed, "timestamp_ms %d is not positive", *w.TimestampMS)
	case w.Metrics == nil:
		return Report{}, nil, refuse(ErrMalformed, `missing field "metrics"`)
	}
	return Report{
		Version:     *w.Version,
		Agent:       w.Agent,
		Nonce:       *w.Nonce,
		Seq:         *w.Seq,
		TimestampMS: *w.TimestampMS,
		Missing:     w.Missing,
	}, w.Metrics, nil
}

// checkValues decodes the raw metric values, in name order so that the
// error is deterministic. Errors wrap ErrOutOfRange or ErrMalformed.
func checkValues(raw map[string]json.RawMessage) (map[string]float64, error) {
	names := make([]string, 0, len(raw))
	for name := range raw {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make(map[string]float64, len(raw))
	for _, name := range names {
		if name == "" {
			return nil, refuse(ErrMalformed, "metric with an empty name")
		}
		v, err := parseMetricValue(raw[name])
		if err != nil {
			return nil, fmt.Errorf("metric %q: %w", name, err)
		}
		out[name] = v
	}
	return out, nil
}

// parseMetricValue decodes one metric value. A JSON number must be in
// [0, 100]. JSON cannot carry NaN or infinities as numbers; encoders that
// write them as the strings "NaN", "Infinity", "-Infinity" (the protobuf
// JSON mapping) or "Inf", "+Inf", "-Inf" produce an out-of-range value, any
// other string or type a malformed one. A number too large for a float64
// (1e999) is out of range.
func parseMetricValue(raw json.RawMessage) (float64, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return 0, refuse(ErrMalformed, "empty value")
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, refuse(ErrMalformed, "decoding value: %v", err)
		}
		switch s {
		case "NaN", "Infinity", "-Infinity", "Inf", "+Inf", "-Inf":
			return 0, refuse(ErrOutOfRange, "value %s is not a finite number", s)
		}
		return 0, refuse(ErrMalformed, "value is a string, not a number")
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
	default:
		return 0, refuse(ErrMalformed, "value %.20s is not a number", raw)
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, refuse(ErrMalformed, "decoding value: %v", err)
	}
	v, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, refuse(ErrOutOfRange, "value %.20s overflows a float64", n)
		}
		return 0, refuse(ErrMalformed, "value %.20s: %v", n, err)
	}
	if math.IsNaN(v) || v < 0 || v > 100 {
		return 0, refuse(ErrOutOfRange, "value %v is outside [0, 100]", v)
	}
	return v, nil
}

// clamp limits a finite figure to [0, 100], rounded to 0.01. It reports
// false for NaN and infinities, which carry no load information.
func clamp(v float64) (float64, bool) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false
	}
	v = math.Max(0, math.Min(100, v))
	return math.Round(v*100) / 100, true
}

// cut shortens s to at most n bytes for use in a reason, dropping a rune
// split by the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-3], "") + "..."
}
