package main

import (
	"context"
	"net/netip"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/dispatcher"
	"github.com/dlbproject/dlb/pkg/doctor"
	"github.com/dlbproject/dlb/pkg/lb"
)

// executorConfig returns the executor's configuration (its interface and
// NFA): the part of the engine the server checks need.
type executorConfig func(ctx context.Context) (lb.Executor, error)

// engineExecutor reads the executor's configuration from the engine.
func engineExecutor(e *dispatcher.Engine) executorConfig {
	return func(ctx context.Context) (lb.Executor, error) {
		cfg, err := e.Config(ctx)
		return cfg.Executor, err
	}
}

// serverChecker runs pkg/doctor's checks from the executor's interface
// and the dispatcher's NFA, as the engine has them.
type serverChecker struct {
	executor executorConfig
	// run is doctor.Run; tests replace it.
	run func(context.Context, doctor.Params) (doctor.Report, error)
}

func newServerChecker(e executorConfig) *serverChecker {
	return &serverChecker{executor: e, run: doctor.Run}
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
	ex, err := c.executor(ctx)
	if err != nil {
		return api.ServerCheckReport{}, err
	}
	if !ex.Started || ex.Interface == "" {
		return api.ServerCheckReport{}, lb.Errorf("executor", "", "is not started: the checks leave from its interface (dlbctl executor start --interface IF)")
	}
	// The checks leave from the NFA of the cluster address's family.
	p.Interface, p.Source = ex.Interface, ex.NFAFor(p.VIP)
	if !p.Source.IsValid() {
		return api.ServerCheckReport{}, lb.Errorf("nfa", "", "of the cluster address's family is not set: the checks leave from it (dlbctl executor set nfa ADDR)")
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
