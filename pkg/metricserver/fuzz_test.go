package metricserver

import (
	"errors"
	"maps"
	"os"
	"testing"
	"time"
)

// FuzzParsePromQuery feeds query strings (from the operator's
// configuration): ParsePromQuery must not panic, and a query it accepts
// must print (String, the key of its value in reports) as a query that
// parses back to the same query.
func FuzzParsePromQuery(f *testing.F) {
	for _, s := range []string{"cpuload", "node_load5/8", `node_filesystem_avail_bytes{mountpoint="/", fstype="ext4"}/1e10`,
		`x{a="q\"uo\\te\n"}`, `x{}`, "ns:rule_name", "9lives", `memload{a="b"}`, "x/0", "x/NaN"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := ParsePromQuery(s)
		if err != nil {
			return
		}
		if q.Name == "" || !(q.Max >= 0) {
			t.Fatalf("%q: accepted %+v", s, q)
		}
		again, err := ParsePromQuery(q.String())
		if err != nil || again.Name != q.Name || again.Max != q.Max || !maps.Equal(again.Labels, q.Labels) ||
			(again.Labels == nil) != (q.Labels == nil) {
			t.Fatalf("%q: accepted %+v, printed %q, which parses as %+v, %v", s, q, q.String(), again, err)
		}
	})
}

// FuzzPromScrapes feeds two scrapes of an exporter (what a backend's
// endpoint sends): parsing must refuse what it refuses as ErrMalformed,
// and evaluating the queries on the scrapes must not panic.
func FuzzPromScrapes(f *testing.F) {
	b1, err := os.ReadFile("testdata/node_exporter_1.prom")
	if err != nil {
		f.Fatal(err)
	}
	b2, err := os.ReadFile("testdata/node_exporter_2.prom")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b1, b2)
	f.Add([]byte("# TYPE node_cpu_seconds_total counter\nnode_cpu_seconds_total{cpu=\"0\",mode=\"idle\"} 1\n"),
		[]byte("# TYPE node_cpu_seconds_total counter\nnode_cpu_seconds_total{cpu=\"0\",mode=\"idle\"} NaN\n"))
	f.Add([]byte("x 1\n# EOF\n"), []byte("x +Inf\n"))
	var queries []PromQuery
	for _, s := range []string{"cpuload", "memload", "loadavg", "node_load5/8", "x/1",
		`node_filesystem_avail_bytes{mountpoint="/"}/1e9`, "node_pressure_cpu_waiting_seconds_total/1"} {
		q, err := ParsePromQuery(s)
		if err != nil {
			f.Fatal(err)
		}
		queries = append(queries, q)
	}
	f.Fuzz(func(t *testing.T, first, second []byte) {
		p, err := NewPromSource("http://127.0.0.1:9100/metrics", PromOptions{})
		if err != nil {
			t.Fatal(err)
		}
		at := time.Unix(1000, 0)
		for _, body := range [][]byte{first, second} {
			fams, err := parsePromText(body)
			if err != nil {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("refused a scrape with %v, not ErrMalformed", err)
				}
				return
			}
			for _, q := range queries {
				_, _ = p.eval(fams, q, q.String(), at)
			}
			at = at.Add(10 * time.Second)
		}
	})
}

// FuzzParseReport feeds report bodies (from a backend's metric agent,
// after their signature): parsing and checking the values must not
// panic, and values accepted are finite numbers in [0, 100].
func FuzzParseReport(f *testing.F) {
	f.Add([]byte(`{"version":1,"agent":"a","nonce":"n","seq":1,"timestamp_ms":1700000000000,"metrics":{"cpuload":12.5,"x":0}}`))
	f.Add([]byte(`{"version":1,"nonce":"n","seq":1,"timestamp_ms":1,"metrics":{"a":"NaN","b":1e999,"c":-0}}`))
	f.Add([]byte(`{"version":1,"nonce":"n","seq":1,"timestamp_ms":1,"metrics":{},"missing":{"a":"why"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		_, raw, err := parseReport(body)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("refused with %v, not ErrMalformed", err)
			}
			return
		}
		vals, err := checkValues(raw)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrOutOfRange) {
				t.Fatalf("values refused with %v", err)
			}
			return
		}
		for name, v := range vals {
			if !(v >= 0 && v <= 100) {
				t.Fatalf("metric %q: accepted %v", name, v)
			}
		}
	})
}
