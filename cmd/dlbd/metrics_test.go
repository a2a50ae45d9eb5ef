package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/lb"
)

// TestCheckMetrics: metric settings the pollers could not use are
// refused, naming the field and what is wrong.
func TestCheckMetrics(t *testing.T) {
	dir := t.TempDir()
	good, open, short := filepath.Join(dir, "good"), filepath.Join(dir, "open"), filepath.Join(dir, "short")
	for _, f := range []struct {
		path, data string
		mode       os.FileMode
	}{{good, "0123456789abcdef0123456789abcdef\n", 0o600}, {open, "0123456789abcdef0123456789abcdef\n", 0o644}, {short, "abc\n", 0o600}} {
		if err := os.WriteFile(f.path, []byte(f.data), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(f.path, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	agent := func(secret string) lb.MetricServer {
		ms := lb.NewMetricServer()
		ms.SecretFile = secret
		return ms
	}
	prom := lb.MetricServer{Source: "prometheus", Port: lb.DefaultPrometheusPort, Path: "/metrics"}
	for _, c := range []struct {
		name  string
		ms    lb.MetricServer
		names []string
		field string // "" accepted
		want  string
	}{
		{"dlbmetricd with its secret", agent(good), []string{"cpuload", "memload"}, "", ""},
		{"no secret file", agent(""), []string{"cpuload"}, "secretfile", "dlbctl metric set --secret-file FILE first"},
		{"a secret file that is not there", agent(filepath.Join(dir, "none")), []string{"cpuload"}, "secretfile", "no such file"},
		{"a secret others may read", agent(open), []string{"cpuload"}, "secretfile", "chmod"},
		{"a secret too short", agent(short), []string{"cpuload"}, "secretfile", "shorter than"},
		{"Prometheus queries", prom, []string{"cpuload", `node_load1{instance="a"}`}, "", ""},
		{"a query that does not parse", prom, []string{"cpuload", "node_load1{bad"}, "metric", "node_load1{bad"},
		{"Prometheus needs no secret", prom, []string{"cpuload"}, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkMetrics(c.ms, c.names)
			if lb.FieldOf(err) != c.field || (err == nil) != (c.field == "") || err != nil && !strings.Contains(err.Error(), c.want) {
				t.Errorf("%v: want field %q naming %q", err, c.field, c.want)
			}
		})
	}
}
