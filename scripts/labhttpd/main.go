// Command labhttpd is a lab tool: a tiny HTTP server that names itself, run
// in every backend namespace of the dlb test lab (scripts/lab.sh) so that a
// client can tell which backend a load-balanced connection reached.
//
// It is not part of dlb and is not meant for production. Every reply carries
// the headers "X-Backend: <name>" and "X-Peer: <client IP>" (the source
// address the server saw, without the port: after NAT it is the translated
// one) and, where it has a body of its own, the body "<name>\n".
//
// Endpoints:
//
//	GET|HEAD /          200, body "<name>\n"
//	GET /slow?ms=N      sleeps N ms (at most 60000), then replies as /
//	GET /bytes?n=N      N bytes of deterministic content (at most 100 MB),
//	                    with "X-Content-SHA256: <hex SHA-256 of the N bytes>";
//	                    &rate=B paces it to B bytes a second (a download
//	                    that stays in flight while a test breaks things)
//	POST /admin/delay?ms=N  from now on, delay every reply by N ms (at most
//	                    60000; 0 removes the delay), to play a slow server
//
// With -udp ADDR it also runs a UDP responder: every datagram is answered,
// to its sender, with "<name> <sender IP:port>\n", sent FROM THE ADDRESS THE
// DATAGRAM WAS SENT TO (IP_PKTINFO / IPV6_PKTINFO), so that a client that
// sent to a VIP held on lo gets its reply from the VIP and its connected
// socket accepts it. An ADDR without a host (":53") serves IPv4 and IPv6 on
// two sockets; if the IPv6 one cannot be opened, it serves IPv4 only and
// logs why. An IPv4 or IPv6 host serves that family only.
//
// Usage:
//
//	labhttpd -name b1 [-listen :80] [-udp :53]
//
// It logs to stderr and shuts down gracefully on SIGTERM or SIGINT.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	// maxSlow bounds /slow so a mistyped test cannot hang a server forever.
	maxSlow = 60 * time.Second
	// maxBytes bounds /bytes (100 MB).
	maxBytes = 100 << 20
	// shutdownTimeout is how long in-flight requests get after a signal.
	shutdownTimeout = 5 * time.Second
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("labhttpd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: labhttpd -name NAME [-listen ADDR] [-udp ADDR]\n\n"+
			"Lab tool: an HTTP server that answers with its own name\n"+
			"(body \"NAME\\n\", headers X-Backend: NAME and X-Peer: CLIENT-IP).\n"+
			"Endpoints: GET|HEAD /, GET /slow?ms=N (N<=60000), GET /bytes?n=N (N<=104857600,\n"+
			"with X-Content-SHA256), POST /admin/delay?ms=N (delay every reply by N ms; 0 removes it).\n"+
			"With -udp, answers every datagram with \"NAME PEER-IP:PORT\\n\" from the address it was sent to.\n\n")
		fs.PrintDefaults()
	}
	listen := fs.String("listen", ":80", "address to listen on")
	name := fs.String("name", "", "backend name to report (required)")
	udpAddr := fs.String("udp", "", `UDP responder address, e.g. ":53" (IPv4 and IPv6); empty: off`)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *name == "" || fs.NArg() != 0 {
		fmt.Fprintln(fs.Output(), "labhttpd: -name is required and no positional arguments are accepted")
		fs.Usage()
		return 2
	}
	if *udpAddr != "" {
		if _, err := udpNetworks(*udpAddr); err != nil {
			fmt.Fprintln(fs.Output(), "labhttpd: -udp:", err)
			return 2
		}
	}

	log := slog.New(slog.NewTextHandler(stderr, nil)).With("name", *name)

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Error("listen failed", "addr", *listen, "err", err)
		return 1
	}
	srv := &http.Server{
		Handler:           newHandler(*name, log),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	errc := make(chan error, 3)
	var udp *udpResponder
	if *udpAddr != "" {
		if udp, err = listenUDP(*udpAddr, *name, log); err != nil {
			log.Error("UDP listen failed", "addr", *udpAddr, "err", err)
			_ = ln.Close()
			return 1
		}
		defer udp.Close()
		udp.Serve(errc)
	}
	go func() { errc <- srv.Serve(ln) }()
	log.Info("listening", "addr", ln.Addr().String())

	select {
	case err := <-errc:
		log.Error("serve failed", "err", err)
		return 1
	case <-ctx.Done():
	}
	log.Info("shutting down")
	if udp != nil {
		udp.Close()
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("shutdown incomplete", "err", err)
		_ = srv.Close()
	}
	log.Info("stopped")
	return 0
}

// newHandler returns the server's routes; every reply names the backend.
func newHandler(name string, log *slog.Logger) http.Handler {
	body := name + "\n"
	var delay atomic.Int64 // ms added before every reply
	reply := func(w http.ResponseWriter, r *http.Request) {
		if d := delay.Load(); d > 0 {
			t := time.NewTimer(time.Duration(d) * time.Millisecond)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			_, _ = io.WriteString(w, body)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", reply) // GET also matches HEAD
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, r *http.Request) {
		ms, err := boundedInt(r.URL.Query().Get("ms"), int64(maxSlow/time.Millisecond))
		if err != nil {
			http.Error(w, "ms: "+err.Error(), http.StatusBadRequest)
			return
		}
		t := time.NewTimer(time.Duration(ms) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
			reply(w, r)
		case <-r.Context().Done(): // client went away
		}
	})
	mux.HandleFunc("POST /admin/delay", func(w http.ResponseWriter, r *http.Request) {
		ms, err := boundedInt(r.URL.Query().Get("ms"), int64(maxSlow/time.Millisecond))
		if err != nil {
			http.Error(w, "ms: "+err.Error(), http.StatusBadRequest)
			return
		}
		delay.Store(ms)
		log.Info("reply delay set", "ms", ms)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /bytes", func(w http.ResponseWriter, r *http.Request) {
		n, err := boundedInt(r.URL.Query().Get("n"), maxBytes)
		if err != nil {
			http.Error(w, "n: "+err.Error(), http.StatusBadRequest)
			return
		}
		var rate int64
		if s := r.URL.Query().Get("rate"); s != "" {
			if rate, err = boundedInt(s, maxBytes); err != nil || rate == 0 {
				http.Error(w, "rate: want 1.."+strconv.Itoa(maxBytes)+" bytes a second", http.StatusBadRequest)
				return
			}
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		w.Header().Set("X-Content-SHA256", patternSHA256(n))
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodHead {
			return
		}
		if rate == 0 {
			_, _ = io.CopyN(w, &patternReader{}, n)
			return
		}
		// Paced: a chunk every 10 ms, so that the stream stays even.
		src, start := &patternReader{}, time.Now()
		chunk := max(rate/100, 1)
		for sent := int64(0); sent < n; {
			k := min(chunk, n-sent)
			if _, err := io.CopyN(w, src, k); err != nil {
				return
			}
			sent += k
			if d := time.Duration(float64(sent) / float64(rate) * float64(time.Second)); d > time.Since(start) {
				time.Sleep(d - time.Since(start))
			}
		}
	})
	return withBackend(name, log, mux)
}

// withBackend sets X-Backend and X-Peer on every reply (errors included)
// and logs requests at debug level so a load test does not flood the log.
func withBackend(name string, log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Backend", name)
		w.Header().Set("X-Peer", peerIP(r.RemoteAddr))
		log.Debug("request", "method", r.Method, "uri", r.RequestURI, "remote", r.RemoteAddr)
		next.ServeHTTP(w, r)
	})
}

// peerIP returns the IP part of a remote "ip:port" address, IPv4-mapped
// IPv6 addresses shown as IPv4; anything unparsable is returned as is.
func peerIP(remote string) string {
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		return ap.Addr().Unmap().WithZone("").String()
	}
	if host, _, err := net.SplitHostPort(remote); err == nil {
		return host
	}
	return remote
}

// maxCachedSums bounds the cache of /bytes digests.
const maxCachedSums = 64

// sumCache remembers the digests of recent /bytes sizes: hashing 100 MB
// takes long enough to delay the first byte of every large reply.
var sumCache struct {
	sync.Mutex
	m map[int64]string
}

// patternSHA256 returns the hex SHA-256 of the first n bytes of the
// patternReader stream: what GET /bytes?n=N sends.
func patternSHA256(n int64) string {
	sumCache.Lock()
	sum, ok := sumCache.m[n]
	sumCache.Unlock()
	if ok {
		return sum
	}
	h := sha256.New()
	_, _ = io.CopyN(h, &patternReader{}, n)
	sum = hex.EncodeToString(h.Sum(nil))
	sumCache.Lock()
	if sumCache.m == nil || len(sumCache.m) >= maxCachedSums {
		sumCache.m = make(map[int64]string, maxCachedSums) // start over: sizes are few
	}
	sumCache.m[n] = sum
	sumCache.Unlock()
	return sum
}

// boundedInt parses a non-negative decimal no larger than max.
func boundedInt(s string, max int64) (int64, error) {
	if s == "" {
		return 0, errors.New("missing")
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errors.New("not an integer")
	}
	if v < 0 || v > max {
		return 0, fmt.Errorf("out of range [0, %d]", max)
	}
	return v, nil
}

// patternReader yields an endless, deterministic byte stream: byte i of the
// stream is pattern[i%len(pattern)], so a client can verify what it got.
type patternReader struct{ off int }

const pattern = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ\r\n"

func (r *patternReader) Read(p []byte) (int, error) {
	for i := 0; i < len(p); {
		c := copy(p[i:], pattern[r.off:])
		i += c
		r.off = (r.off + c) % len(pattern)
	}
	return len(p), nil
}
