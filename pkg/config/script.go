package config

import (
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"

	"github.com/dlbproject/dlb/pkg/lb"
)

// Script writes cfg as a script of dlbctl commands (IBM's "file save")
// that recreates it with "dlbctl file load" on a dispatcher that has none
// of it. Settings at their defaults are left out, so that the script reads
// as the operator's choices; the defaults come from package lb, the one
// place that knows them.
//
// Each port follows its cluster and each server its port, servers with
// equal settings joined with '+' on one line; advisors and metrics follow
// (they need their ports), then the clusters' proportions (starting an
// advisor or adding a metric may raise them), quiesced servers, and the
// executor and the manager start last, once everything they work on is
// defined. A port's crossport names another port of its cluster, so it is
// set once all the cluster's ports exist.
func Script(w io.Writer, cfg lb.Config) error {
	sw := &scriptWriter{w: w}
	def := lb.NewConfig()
	ex := cfg.Executor
	var exLines []string
	// An address sets the value of its family, so the IPv4 and the IPv6
	// values take a line each.
	for _, kv := range []struct {
		name string
		a    netip.Addr
	}{{"nfa", ex.NFA}, {"nfa", ex.NFA6}, {"clientgateway", ex.ClientGateway}, {"clientgateway", ex.ClientGateway6}} {
		if kv.a.IsValid() {
			exLines = append(exLines, "executor set "+kv.name+" "+kv.a.String())
		}
	}
	if ex.FinTimeout != def.Executor.FinTimeout {
		exLines = append(exLines, fmt.Sprintf("executor set fintimeout %d", ex.FinTimeout))
	}
	if len(exLines) > 0 {
		sw.printf("\n%s\n", strings.Join(exLines, "\n"))
	}

	var quiesced []string
	for _, cl := range cfg.Clusters {
		sw.printf("\ncluster add %s", cl.Address)
		if cl.Configure {
			sw.printf(" --configure")
		}
		if cl.PrimaryHost.IsValid() {
			sw.printf(" --primaryhost %s", cl.PrimaryHost)
		}
		sw.printf("%s\n", announceFlags(cl))
		var crossports []string
		for _, p := range cl.Ports {
			svc := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}.String()
			sw.printf("port add %s%s\n", svc, portFlags(p))
			var down []string
			for i := 0; i < len(p.Servers); {
				// Servers with equal settings, in a row, share a line.
				j := i + 1
				for j < len(p.Servers) && sameServerSettings(p.Servers[i], p.Servers[j]) {
					j++
				}
				addrs := make([]string, 0, j-i)
				for _, s := range p.Servers[i:j] {
					addrs = append(addrs, s.Address.String())
					t := svc + "@" + s.Address.String()
					if s.Down {
						down = append(down, s.Address.String())
					}
					if s.Quiesced {
						q := "manager quiesce " + t
						if s.QuiesceNow {
							q += " --now"
						}
						quiesced = append(quiesced, q)
					}
				}
				sw.printf("server add %s@%s%s\n", svc, strings.Join(addrs, "+"), serverFlags(p.Servers[i]))
				i = j
			}
			if len(down) > 0 {
				sw.printf("server down %s@%s\n", svc, strings.Join(down, "+"))
			}
			if p.CrossPort != 0 {
				crossports = append(crossports, fmt.Sprintf("port set %s --crossport %d", svc, p.CrossPort))
			}
		}
		for _, l := range crossports {
			sw.printf("%s\n", l)
		}
	}

	if len(cfg.Advisors) > 0 {
		sw.printf("\n")
	}
	for _, a := range cfg.Advisors {
		cl := ""
		if a.Cluster.IsValid() {
			cl = a.Cluster.String()
		}
		sw.printf("advisor start %s %s@%d --interval %g --connecttimeout %g --receivetimeout %g --retries %d --rise %d --fall %d",
			quote(a.Name), cl, a.Port, a.Interval, a.ConnectTimeout, a.ReceiveTimeout, a.Retries, a.Rise, a.Fall)
		if a.Program != "" {
			sw.printf(" --program %s --mode %s", quote(a.Program), quote(a.Mode))
			for _, arg := range a.Args {
				sw.printf(" --arg %s", quote(arg))
			}
		}
		sw.printf("\n")
	}

	ms, defMS := cfg.MetricServer, def.MetricServer
	var msFlags []string
	if ms.Source != defMS.Source {
		msFlags = append(msFlags, "--source "+quote(ms.Source))
	}
	if ms.Port != defaultMetricPort(ms.Source) {
		msFlags = append(msFlags, fmt.Sprintf("--port %d", ms.Port))
	}
	if ms.SecretFile != "" {
		msFlags = append(msFlags, "--secret-file "+quote(ms.SecretFile))
	}
	if msDef, _ := metricDefaults(ms.Source); ms.Path != msDef.Path {
		msFlags = append(msFlags, "--path "+quote(ms.Path))
	}
	if len(msFlags) > 0 {
		sw.printf("\nmetric set %s\n", strings.Join(msFlags, " "))
	}
	metrics := false
	for _, cl := range cfg.Clusters {
		if len(cl.Metrics) > 0 {
			metrics = true
			sw.printf("metric add %s\n", quote(cl.Address.String()+"@"+strings.Join(cl.Metrics, "+")))
		}
	}

	// Advisors and metrics raise zero proportions when loaded: pin the
	// saved values after them.
	pin := len(cfg.Advisors) > 0 || metrics
	var props []string
	for _, cl := range cfg.Clusters {
		if pin || cl.Proportions != lb.DefaultProportions() {
			pr := cl.Proportions
			props = append(props, fmt.Sprintf("cluster set %s --proportions %d %d %d %d", cl.Address, pr.Active, pr.New, pr.Port, pr.System))
		}
	}
	if len(props) > 0 {
		sw.printf("\n%s\n", strings.Join(props, "\n"))
	}
	if len(quiesced) > 0 {
		sw.printf("\n%s\n", strings.Join(quiesced, "\n"))
	}

	m, defM := cfg.Manager, def.Manager
	if m.Interval != defM.Interval || m.Refresh != defM.Refresh || m.Smoothing != defM.Smoothing || m.Sensitivity != defM.Sensitivity {
		sw.printf("\nmanager set interval %g refresh %d smoothing %g sensitivity %g\n", m.Interval, m.Refresh, m.Smoothing, m.Sensitivity)
	}
	haScript(sw, cfg.HA)
	bgpScript(sw, cfg.BGP)
	if ex.Started {
		sw.printf("\nexecutor start --interface %s --xdp-mode %s\n", quote(ex.Interface), ex.XDPMode)
	}
	if m.Started {
		sw.printf("manager start\n")
	}
	return sw.err
}

// defaultMetricPort is the port a metric source listens on by default.
func defaultMetricPort(source string) uint16 {
	if def, known := metricDefaults(source); known {
		return def.Port
	}
	return lb.DefaultMetricPort
}

// portFlags returns the flags of "port add" that recreate p's settings
// (protocol, method, staletimeout and weightbound always: they are what
// an operator reads a port by).
func portFlags(p lb.Port) string {
	def := lb.NewPort(p.Number)
	var b strings.Builder
	fmt.Fprintf(&b, " --protocol %s --method %s --staletimeout %d --weightbound %d", p.Protocol, p.Method, p.StaleTimeout, p.WeightBound)
	if p.StickyTime != def.StickyTime {
		fmt.Fprintf(&b, " --stickytime %d", p.StickyTime)
	}
	if p.StickyMask != def.StickyMask {
		fmt.Fprintf(&b, " --stickymask %d", p.StickyMask)
	}
	if p.Selection != def.Selection {
		fmt.Fprintf(&b, " --selectionalgorithm %s", quote(p.Selection.String()))
	}
	if p.MaxHalfOpen != def.MaxHalfOpen {
		fmt.Fprintf(&b, " --maxhalfopen %d", p.MaxHalfOpen)
	}
	if p.AllDown != def.AllDown {
		fmt.Fprintf(&b, " --alldown %s", p.AllDown)
	}
	if p.TableSize != def.TableSize {
		fmt.Fprintf(&b, " --tablesize %d", p.TableSize)
	}
	return b.String()
}

// serverFlags returns the flags of "server add" that recreate s's
// settings (weight always).
func serverFlags(s lb.Server) string {
	var b strings.Builder
	b.WriteString(" --weight " + strconv.FormatUint(uint64(s.Weight), 10))
	if s.FixedWeight {
		b.WriteString(" --fixedweight yes")
	}
	if s.AdvisorRequest != "" {
		b.WriteString(" --advisorrequest " + quote(s.AdvisorRequest))
	}
	if s.AdvisorResponse != "" {
		b.WriteString(" --advisorresponse " + quote(s.AdvisorResponse))
	}
	if s.MapPort != 0 {
		b.WriteString(" --mapport " + strconv.Itoa(int(s.MapPort)))
	}
	if s.ReturnAddress.IsValid() {
		b.WriteString(" --returnaddress " + s.ReturnAddress.String())
	}
	if s.Router.IsValid() {
		b.WriteString(" --router " + s.Router.String())
	}
	return b.String()
}

// sameServerSettings reports whether two servers' "server add" flags are
// the same, so that they can share a line.
func sameServerSettings(a, b lb.Server) bool {
	a.Address, b.Address = netip.Addr{}, netip.Addr{}
	a.Down, b.Down = false, false
	a.Quiesced, b.Quiesced, a.QuiesceNow, b.QuiesceNow = false, false, false, false
	return a == b
}

// quote quotes s for dlbctl's script reader if it needs it.
func quote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\r\n'\"\\#") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}

// scriptWriter keeps the first write error.
type scriptWriter struct {
	w   io.Writer
	err error
}

func (s *scriptWriter) printf(format string, args ...any) {
	if s.err == nil {
		_, s.err = fmt.Fprintf(s.w, format, args...)
	}
}
