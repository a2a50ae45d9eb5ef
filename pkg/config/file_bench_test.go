package config

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/lb"
)

// bigConfig has 100 ports of 100 servers each: 10,000 servers.
func bigConfig() lb.Config {
	cfg := lb.NewConfig()
	cl := lb.NewCluster(netip.MustParseAddr("198.18.0.100"))
	for p := 0; p < 100; p++ {
		port := lb.NewPort(uint16(1000 + p))
		for s := 0; s < 100; s++ {
			port.Servers = append(port.Servers, lb.Server{Address: netip.AddrFrom4([4]byte{198, 19, byte(p), byte(s + 1)}), Weight: 10})
		}
		cl.Ports = append(cl.Ports, port)
	}
	cfg.Clusters = []lb.Cluster{cl}
	return cfg
}

// BenchmarkFile10k reads, writes, plans and prepares a configuration of
// 10,000 servers (the plan and the edit against one that differs in one
// server of each port).
func BenchmarkFile10k(b *testing.B) {
	cfg := bigConfig()
	data, err := MarshalFile(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("file: %d bytes", len(data))
	other := cfg.Clone()
	for i := range other.Clusters[0].Ports {
		other.Clusters[0].Ports[i].Servers[0].Weight = 5
	}
	b.Run("ReadFile", func(b *testing.B) {
		for b.Loop() {
			if _, err := ReadFile(data, Options{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("MarshalFile", func(b *testing.B) {
		for b.Loop() {
			if _, err := MarshalFile(cfg); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Plan", func(b *testing.B) {
		for b.Loop() {
			if n := len(Plan(cfg, other)); n != 100 {
				b.Fatalf("%d steps", n)
			}
		}
	})
	b.Run("PrepareConfig", func(b *testing.B) {
		ed, err := NewEditor(cfg, Options{})
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := ed.PrepareConfig(other); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAliasesAtTheLimit reads a file whose aliases expand to nearly
// the most they may: the cost an attacker can ask for with a small file.
func BenchmarkAliasesAtTheLimit(b *testing.B) {
	var s strings.Builder
	s.WriteString("x0: &x0 [1, 1, 1, 1, 1, 1, 1, 1]\n")
	for i := 1; i < 6; i++ { // 8^6 = 262144 values
		fmt.Fprintf(&s, "x%d: &x%d [", i, i)
		for j := 0; j < 8; j++ {
			if j > 0 {
				s.WriteString(", ")
			}
			fmt.Fprintf(&s, "*x%d", i-1)
		}
		s.WriteString("]\n")
	}
	data := []byte(s.String())
	b.Logf("file: %d bytes", len(data))
	for b.Loop() {
		_, err := ReadFile(data, Options{})
		if err == nil {
			b.Fatal("accepted")
		}
	}
}
