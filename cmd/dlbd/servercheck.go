package main

import (
	"context"
	"net/netip"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/doctor"
	"github.com/dlbproject/dlb/pkg/lb"
)

// executorReporter is the part of the engine the server checks need.
type executorReporter interface {
	ExecutorReport(ctx context.Context) (api.ExecutorReport, error)
}

// serverChecker runs pkg/doctor's checks from the executor's interface
// and the dispatcher's NFA, as the engine reports them.
type serverChecker struct {
	engine executorReporter
	// run is doctor.Run; tests replace it.
	run func(context.Context, doctor.Params) (doctor.Report, error)
}

func newServerChecker(e executorReporter) *serverChecker {
	return &serverChecker{engine: e, run: doctor.Run}
}

// CheckServer implements server.ServerChecker.
func (c *serverChecker) CheckServer(ctx context.Context, target, client string) (api.ServerCheckReport, error) {
	t, err := lb.ParseTarget(target, lb.ServerDepth)
	if err != nil {
		return api.ServerCheckReport{}, err
	}
	if len(t.Clusters) != 1 || len(t.Ports) != 1 || len(t.Servers) != 1 {
		return api.ServerCheckReport{}, lb.Errorf("target", target, "server check takes one cluster, one port and one server (VIP@PORT@SERVER), no wildcards or lists")
	}
	p := doctor.Params{VIP: t.Clusters[0], Port: t.Ports[0], Server: t.Servers[0], Timeout: time.Second}
	if client != "" {
		if p.Client, err = netip.ParseAddr(client); err != nil {
			return api.ServerCheckReport{}, lb.Errorf("client", client, "not an IP address")
		}
	}
	ex, err := c.engine.ExecutorReport(ctx)
	if err != nil {
		return api.ServerCheckReport{}, err
	}
	if !ex.Started || ex.Interface == "" {
		return api.ServerCheckReport{}, lb.Errorf("executor", "", "is not started: the checks leave from its interface (dlbctl executor start --interface IF)")
	}
	if ex.NFA == "" {
		return api.ServerCheckReport{}, lb.Errorf("nfa", "", "is not set: the checks leave from it (dlbctl executor set nfa ADDR)")
	}
	p.Interface = ex.Interface
	if p.Source, err = netip.ParseAddr(ex.NFA); err != nil {
		return api.ServerCheckReport{}, err
	}
	if err := p.Validate(); err != nil {
		return api.ServerCheckReport{}, lb.Errorf("target", target, "%v", err)
	}
	r, err := c.run(ctx, p)
	if err != nil {
		return api.ServerCheckReport{}, err
	}
	out := api.ServerCheckReport{Target: target, Client: client, Interface: r.Interface, Source: r.Source.String(), OK: r.OK(),
		Checks: make([]api.ServerCheck, 0, len(r.Checks))}
	if r.ServerMAC != nil {
		out.ServerMAC = r.ServerMAC.String()
	}
	for _, ch := range r.Checks {
		out.Checks = append(out.Checks, api.ServerCheck{Name: ch.Name, Result: ch.Result, Detail: ch.Detail, Fix: ch.Fix})
	}
	return out, nil
}
