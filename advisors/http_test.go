package advisors

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseHTTPRequest(t *testing.T) {
	tests := []struct {
		in      string
		ok      bool
		method  string
		path    string
		proto   string
		host    string
		headers int
	}{
		{"", true, "HEAD", "/", "HTTP/1.1", "", 0},
		{"GET /health HTTP/1.1", true, "GET", "/health", "HTTP/1.1", "", 0},
		{"GET /health", true, "GET", "/health", "HTTP/1.1", "", 0},
		{"HEAD / HTTP/1.0", true, "HEAD", "/", "HTTP/1.0", "", 0},
		{"OPTIONS * HTTP/1.1", true, "OPTIONS", "*", "HTTP/1.1", "", 0},
		{`GET / HTTP/1.1\r\nHost: www.dlb.test\r\nX-Probe: dlb`, true, "GET", "/", "HTTP/1.1", "www.dlb.test", 1},
		{"GET / HTTP/1.1\nX-A: 1\nX-B: 2", true, "GET", "/", "HTTP/1.1", "", 2},
		{"GET", false, "", "", "", "", 0},
		{"GET health", false, "", "", "", "", 0},
		{"GET /a b HTTP/1.1", false, "", "", "", "", 0},
		{"GET / HTTP/2.0", false, "", "", "", "", 0},
		{"G(T / HTTP/1.1", false, "", "", "", "", 0},
		{"GET /\x00 HTTP/1.1", false, "", "", "", "", 0},
		{"GET  / HTTP/1.1", false, "", "", "", "", 0},
		{"GET / HTTP/1.1\nbad header", false, "", "", "", "", 0},
		{"GET / HTTP/1.1\nConnection: keep-alive", false, "", "", "", "", 0},
	}
	for _, tc := range tests {
		r, err := parseHTTPRequest(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("parseHTTPRequest(%q) error %v, want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if tc.ok && (r.method != tc.method || r.path != tc.path || r.proto != tc.proto || r.host != tc.host || len(r.headers) != tc.headers) {
			t.Errorf("parseHTTPRequest(%q) = %+v", tc.in, r)
		}
	}
}

func TestParseHTTPExpect(t *testing.T) {
	tests := []struct {
		in     string
		ok     bool
		substr string
		good   []int
		bad    []int
	}{
		{"", true, "", []int{200, 204, 301, 399}, []int{100, 199, 400, 503}},
		{"ok", true, "ok", []int{200, 302}, []int{404}},
		{"status=200", true, "", []int{200}, []int{201, 301}},
		{"status=200-299,304", true, "", []int{200, 250, 299, 304}, []int{301, 404}},
		{"status=503 sorry, down", true, "sorry, down", []int{503}, []int{200}},
		{"status=", false, "", nil, nil},
		{"status=abc", false, "", nil, nil},
		{"status=300-200", false, "", nil, nil},
		{"status=200-999", false, "", nil, nil},
	}
	for _, tc := range tests {
		e, err := parseHTTPExpect(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("parseHTTPExpect(%q) error %v, want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if !tc.ok {
			continue
		}
		if e.substr != tc.substr {
			t.Errorf("parseHTTPExpect(%q).substr = %q", tc.in, e.substr)
		}
		for _, c := range tc.good {
			if !e.statusOK(c) {
				t.Errorf("parseHTTPExpect(%q) rejects %d", tc.in, c)
			}
		}
		for _, c := range tc.bad {
			if e.statusOK(c) {
				t.Errorf("parseHTTPExpect(%q) accepts %d", tc.in, c)
			}
		}
	}
}

// testHTTPHandler is the handler of the httptest servers: "/" says ok,
// "/503" is down for maintenance, "/slow" answers after 3s, "/chunked"
// streams a chunked body with "ready" in its second chunk, "/big" sends
// 1 MB before "needle", "/host" echoes the Host header.
func testHTTPHandler(seen chan<- string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		select {
		case seen <- r.Method + " " + r.URL.RequestURI() + " host=" + r.Host + " ua=" + r.UserAgent():
		default:
		}
		w.Header().Set("X-Backend", "dlb-test")
		fmt.Fprintln(w, "status: ok")
	})
	mux.HandleFunc("/503", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/chunked", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "still warming, almost re")
		w.(http.Flusher).Flush()
		fmt.Fprint(w, "ady now")
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		chunk := strings.Repeat("x", 1024)
		for range 1024 {
			if _, err := fmt.Fprint(w, chunk); err != nil {
				return
			}
		}
		fmt.Fprint(w, "needle")
	})
	return mux
}

// httpCases is the table shared by the http and https real-server tests.
var httpCases = []struct {
	name     string
	request  string
	response string
	host     string
	up       bool
	reason   string
}{
	{"default HEAD", "", "", "", true, ""},
	{"GET body match", "GET / HTTP/1.1", "status: ok", "", true, ""},
	{"GET body mismatch", "GET / HTTP/1.1", "healthy", "", false, `body does not contain "healthy"`},
	{"HEAD header match", "", "X-Backend: dlb-test", "", true, ""},
	{"HEAD status line match", "HEAD / HTTP/1.0", "200 OK", "", true, ""},
	{"HEAD mismatch", "", "status: ok", "", false, `reply does not contain "status: ok"`},
	{"503", "GET /503 HTTP/1.1", "", "", false, "status 503"},
	{"503 expected", "GET /503", "status=503 maintenance", "", true, ""},
	{"404", "GET /nope", "", "", false, "status 404"},
	{"200 only", "GET /", "status=204", "", false, "status 200"},
	{"slow", "GET /slow HTTP/1.1", "", "", false, "no reply within 1s"},
	{"chunked split match", "GET /chunked", "ready", "", true, ""},
	{"match beyond the read cap", "GET /big", "needle", "", false, `body does not contain "needle"`},
	{"bad request", "FETCH", "", "", false, `bad advisorrequest: want "METHOD PATH [HTTP/1.x]"`},
	{"bad response", "", "status=9", "", false, `bad advisorresponse: bad status range "9"`},
	{"host header", "GET /", "", "www.dlb.test", true, ""},
	{"header injection through Host", "", "", "a\r\nX-Evil: 1", false, "bad host name"},
}

func TestHTTP(t *testing.T) {
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			seen := make(chan string, 1)
			var srv *httptest.Server
			if scheme == "https" {
				srv = httptest.NewTLSServer(testHTTPHandler(seen))
			} else {
				srv = httptest.NewServer(testHTTPHandler(seen))
			}
			defer srv.Close()
			a, _ := New(scheme)
			for _, tc := range httpCases {
				t.Run(tc.name, func(t *testing.T) {
					tg := loTarget(portOfURL(t, srv.URL))
					tg.Request, tg.Response, tg.Host = tc.request, tc.response, tc.host
					for len(seen) > 0 {
						<-seen
					}
					r, el := probeTimed(t, a, tg)
					if r.Up != tc.up || r.Reason != tc.reason {
						t.Fatalf("got %+v, want up=%v reason %q", r, tc.up, tc.reason)
					}
					t.Logf("%+v in %v", r, el)
					if tc.name == "host header" {
						if got := <-seen; got != "GET / host=www.dlb.test ua=dlb-advisor" {
							t.Errorf("server saw %q", got)
						}
					}
					if tc.name == "default HEAD" {
						want := fmt.Sprintf("HEAD / host=127.0.0.1:%d ua=dlb-advisor", tg.Port)
						if got := <-seen; got != want {
							t.Errorf("server saw %q, want %q", got, want)
						}
					}
				})
			}
			t.Run("refused", func(t *testing.T) {
				r, _ := probeTimed(t, a, loTarget(refusedPort(t)))
				if r.Up || r.Reason != "connect refused" {
					t.Fatalf("got %+v", r)
				}
			})
		})
	}
}

// TestHTTPSNI checks that https sends Target.Host as the TLS server name.
func TestHTTPSNI(t *testing.T) {
	sni := make(chan string, 1)
	srv := httptest.NewUnstartedServer(testHTTPHandler(nil))
	srv.TLS = testTLSConfig(t, sni)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the ssl probe hangs up after the handshake
	srv.StartTLS()
	defer srv.Close()
	for _, name := range []string{"https", "ssl"} {
		a, _ := New(name)
		tg := loTarget(portOfURL(t, srv.URL))
		tg.Host = "www.dlb.test"
		if r, _ := probeTimed(t, a, tg); !r.Up {
			t.Fatalf("%s: %+v", name, r)
		}
		if got := <-sni; got != "www.dlb.test" {
			t.Errorf("%s sent SNI %q", name, got)
		}
	}
}

// TestHTTPRealServer probes Python's http.server, an HTTP implementation
// other than Go's, serving testdata/www.
func TestHTTPRealServer(t *testing.T) {
	py := requireTool(t, "python3", "python3")
	dir, err := filepath.Abs("testdata/www")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "health")); err != nil {
		t.Fatal(err)
	}
	port := freePort(t, "tcp")
	startProcess(t, py, "-m", "http.server", "--bind", "127.0.0.1", "--directory", dir, fmt.Sprint(port))
	waitTCP(t, port)
	a, _ := New("http")
	tests := []struct {
		request, response string
		up                bool
		reason            string
	}{
		{"", "", true, ""},
		{"", "SimpleHTTP", true, ""}, // the Server header
		{"GET /health HTTP/1.1", "dlb-health-ok", true, ""},
		{"GET /health HTTP/1.0", "nope", false, `body does not contain "nope"`},
		{"GET /missing HTTP/1.1", "", false, "status 404"},
		{"GET /missing HTTP/1.1", "status=404", true, ""},
	}
	for _, tc := range tests {
		tg := loTarget(port)
		tg.Request, tg.Response = tc.request, tc.response
		r, el := probeTimed(t, a, tg)
		if r.Up != tc.up || r.Reason != tc.reason {
			t.Errorf("%q/%q: got %+v, want up=%v reason %q", tc.request, tc.response, r, tc.up, tc.reason)
		}
		t.Logf("%q/%q: %+v in %v", tc.request, tc.response, r, el)
	}
}

// TestHTTPSRealServer probes "openssl s_server -www", a TLS and HTTP
// implementation other than Go's, with the https and ssl advisors.
func TestHTTPSRealServer(t *testing.T) {
	ossl := requireTool(t, "openssl", "openssl")
	dir := t.TempDir()
	key, cert := filepath.Join(dir, "key.pem"), filepath.Join(dir, "cert.pem")
	out, err := execOutput(ossl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
		"-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=dlb.test")
	if err != nil {
		t.Fatalf("openssl req: %v\n%s", err, out)
	}
	port := freePort(t, "tcp")
	startProcess(t, ossl, "s_server", "-accept", fmt.Sprintf("127.0.0.1:%d", port), "-key", key, "-cert", cert, "-www", "-quiet")
	waitTCP(t, port)
	tests := []struct {
		advisor, request, response string
		up                         bool
		reason                     string
	}{
		{"ssl", "", "", true, ""},
		{"https", "GET / HTTP/1.0", "", true, ""},
		{"https", "GET / HTTP/1.0", "Ciphers", true, ""}, // s_server -www's status page
		{"https", "GET / HTTP/1.0", "no such text", false, `body does not contain "no such text"`},
		{"http", "GET / HTTP/1.0", "", false, "*"}, // plain HTTP to a TLS port: any down reason
	}
	for _, tc := range tests {
		a, _ := New(tc.advisor)
		tg := loTarget(port)
		tg.Request, tg.Response = tc.request, tc.response
		r, el := probeTimed(t, a, tg)
		if r.Up != tc.up || r.Reason != tc.reason && tc.reason != "*" {
			t.Errorf("%s %q/%q: got %+v, want up=%v reason %q", tc.advisor, tc.request, tc.response, r, tc.up, tc.reason)
		}
		t.Logf("%s %q/%q: %+v in %v", tc.advisor, tc.request, tc.response, r, el)
	}
}

// TestSSL probes a Go TLS server and a plain HTTP server with ssl.
func TestSSL(t *testing.T) {
	tlsSrv := httptest.NewUnstartedServer(testHTTPHandler(nil))
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0) // the ssl probe hangs up after the handshake
	tlsSrv.StartTLS()
	defer tlsSrv.Close()
	plain := httptest.NewServer(testHTTPHandler(nil))
	defer plain.Close()
	a, _ := New("ssl")
	r, el := probeTimed(t, a, loTarget(portOfURL(t, tlsSrv.URL)))
	if !r.Up || r.Load <= 0 {
		t.Errorf("TLS server: %+v", r)
	}
	t.Logf("TLS server: %+v in %v", r, el)
	r, el = probeTimed(t, a, loTarget(portOfURL(t, plain.URL)))
	if r.Up || !strings.HasPrefix(r.Reason, "TLS handshake failed: ") {
		t.Errorf("plain HTTP server: %+v", r)
	}
	t.Logf("plain HTTP server: %+v in %v", r, el)
	r, _ = probeTimed(t, a, loTarget(refusedPort(t)))
	if r.Up || r.Reason != "connect refused" {
		t.Errorf("refused: %+v", r)
	}
}
