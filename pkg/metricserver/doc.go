// Package metricserver is dlb's Metric Server: an agent that runs on each
// backend and reports its system load, and the client with which dlbd's
// manager asks for those reports and checks them. It also reads the same
// figures from any Prometheus endpoint (PromSource), so that a backend that
// already runs node_exporter needs no agent.
//
// # Metrics
//
// Every figure is a load in percent, 0 (idle) to 100 (saturated). The agent
// has three built-in metrics, read with github.com/prometheus/procfs:
//
//   - cpuload: the busy share of all CPUs over the last second, from the
//     difference of two /proc/stat samples taken one second apart by a
//     background sampler (Agent.Run). Idle time is idle + iowait; busy is
//     user, nice, system, irq, softirq and steal.
//   - memload: 100 × (1 − MemAvailable/MemTotal), from /proc/meminfo.
//   - loadavg: 100 × load1 / number of CPUs, from /proc/loadavg and the CPUs
//     listed in /proc/stat, capped at 100.
//
// Operators add metrics with scripts, as with IBM's Metric Server: every
// executable regular file in the scripts directory (hidden files excepted)
// is a metric named after the file, and a script named like a built-in
// replaces it. A script prints one decimal number (a trailing '%' is
// allowed) and exits 0. It runs with a timeout (2 s by default) in its own
// process group, which is killed when the timeout expires; its output is
// capped at 4 KiB. The value is clamped to [0, 100] (250 → 100, −3 → 0).
// Anything else (no number, NaN, a failure, a timeout, a file that group or
// others may write) leaves the metric out of "metrics" and puts it in
// "missing" with the reason: a missing figure is never reported as zero.
//
// # Wire format (version 1)
//
// The agent listens on TCP port 10004 (DefaultPort) and speaks HTTP/1.1,
// or HTTPS when given a certificate. The client asks:
//
//	GET /v1/report?nonce=NONCE
//
// NONCE is 16 to 128 characters of the base64url alphabet (A-Z a-z 0-9 - _),
// fresh and random for every request; dlb's client sends 16 random bytes in
// unpadded base64url (22 characters). A request without exactly one valid
// nonce is answered 400; another path 404; a method other than GET or HEAD
// 405. None of these answers is signed.
//
// The answer is 200 with Content-Type application/json, the header
//
//	X-Dlb-Signature: HEX
//
// and a body that is a JSON object:
//
//	{
//	  "version": 1,                      number, required, must be 1
//	  "agent": "web1",                   string, informational
//	  "nonce": "q3Bz0vUO6Q4Ovb4i1C3tJA", string, required: the request's nonce
//	  "seq": 1730000000123456,           number, required, unsigned 64-bit
//	  "timestamp_ms": 1730000000123,     number, required, > 0: Unix time in ms
//	  "metrics": {"cpuload": 12.5, "memload": 40.31, "loadavg": 3},
//	                                     object, required (may be empty):
//	                                     name → number in [0, 100]
//	  "missing": {"diskload": "killed after the 2s timeout"}
//	                                     object, optional: name → reason
//	}
//
// Unknown fields are ignored. timestamp_ms is when the figures were
// collected; an agent reuses one collection for at most half a second.
// seq is larger in every report of an agent than in the previous one: the
// agent uses max(previous + 1, wall clock in µs since the epoch), so it also
// increases across restarts unless the agent's clock steps back.
//
// # Authentication
//
// Agent and client share a secret (a file of at least 16 bytes, white space
// trimmed; see LoadSecret). The signature HEX is the lowercase hexadecimal
// HMAC-SHA256 of the exact bytes of the response body under the secret:
//
//	HEX = hex(HMAC-SHA256(secret, body))
//
// The body is the canonical signing input: a verifier checks the signature
// on the bytes as received, before parsing them, and never re-encodes. So
//
//	curl -s -D h "http://web1:10004/v1/report?nonce=$(head -c16 /dev/urandom | basenc --base64url | tr -d =)" -o b
//	openssl dgst -sha256 -hmac "$(cat secret)" b
//
// reproduces the header (the shell drops the file's trailing newline, as
// LoadSecret trims surrounding white space). The client
// accepts a report only when, in this order:
//
//  1. the body is at most 64 KiB (MaxReportSize); else ErrMalformed,
//  2. the signature header is present and matches; else ErrUnauthenticated,
//  3. the body is a JSON object with the required fields and types and
//     version 1; else ErrMalformed,
//  4. nonce is the one it sent, so a recorded reply cannot be replayed;
//     else ErrReplayed,
//  5. seq is above that of the last report it accepted from that address;
//     else ErrReplayed,
//  6. timestamp_ms is within the allowed skew (5 s by default) of its own
//     clock, in either direction; else ErrStale,
//  7. every metric value is a JSON number in [0, 100]; else ErrOutOfRange
//     (also for the strings "NaN", "Infinity", "-Infinity", "Inf", "+Inf",
//     "-Inf" and for numbers that overflow a float64) or ErrMalformed (any
//     other non-number).
//
// A failure to get a 200 answer at all is ErrUnavailable. The Client counts
// accepted reports and refusals by reason, in total and per agent.
//
// The agent clamps values before signing, so a correct agent never sends an
// out-of-range value; the client's check guards against other
// implementations. Requests are not authenticated: anyone who can reach the
// agent can read the load figures (bind --listen to the address the
// dispatchers use, filter the port, or use mutual TLS). Running the scripts
// on their behalf is bounded by the half-second reuse of a collection.
//
// # Mutual TLS
//
// Optionally the agent serves HTTPS (ServerTLSConfig) and, with a client
// CA, requires a client certificate signed by it; the client is given a
// matching configuration (ClientTLSConfig, ClientOptions.TLS). The signed
// report is required with TLS too: TLS adds transport confidentiality and
// client authentication, the HMAC keeps the report's integrity and
// freshness checks independent of the certificate setup.
//
// # Staleness
//
// Every Report carries its timestamp; Report.Age tells how old its figures
// are. The manager ignores figures older than three of its intervals.
//
// # Prometheus endpoints
//
// PromSource scrapes a /metrics URL in the text format (bounded to 4 MiB,
// with a timeout) and yields cpuload, memload and loadavg from
// node_exporter's metrics, or any metric by name and label selector with an
// optional scale; see PromSource and ParsePromQuery. Its results are
// Reports too, without nonce or sequence number.
package metricserver
