package config

import (
	"strings"

	"github.com/dlbproject/dlb/pkg/lb"
)

// checkRequests refuses, in next, a server's advisorrequest or
// advisorresponse that an advisor probing it could not use
// (Options.CheckRequest): it would report the server down at every probe.
// It looks only at what the change brings: a server added, or whose
// request or response changed, against every advisor of its port; an
// advisor added against every server of the ports it probes. A server
// whose request stays as it was is not checked again (a weight change or
// a "server down" is never refused for it). Of several refusals it
// returns the first by server, then advisor, so that the error does not
// depend on map order.
func (ed *Editor) checkRequests(next lb.Config, ch Change) error {
	return checkRequests(ed.cfg, next, ch, ed.opts.CheckRequest)
}

// CheckRequests checks every server of cfg against every advisor that
// probes its port, as a change adding them all would be checked (for
// "dlbd --check-config"); check is Options.CheckRequest.
func CheckRequests(cfg lb.Config, check func(advisor, request, response string) error) error {
	return checkRequests(lb.Config{}, cfg, Diff(lb.Config{}, cfg), check)
}

// checkRequests is Editor.checkRequests of the change ch from base to
// next.
func checkRequests(base, next lb.Config, ch Change, check func(advisor, request, response string) error) error {
	if check == nil {
		return nil
	}
	var first *lb.FieldError
	firstKey := ""
	one := func(a lb.Advisor, k lb.BackendKey, s *lb.Server) {
		if a.Name == "exec" || (s.AdvisorRequest == "" && s.AdvisorResponse == "") {
			return
		}
		err := check(a.Name, s.AdvisorRequest, s.AdvisorResponse)
		if err == nil {
			return
		}
		order := k.String() + " " + a.Key()
		if first != nil && order >= firstKey {
			return
		}
		field, msg := "advisorrequest", err.Error()
		if rest, ok := strings.CutPrefix(msg, "advisorresponse: "); ok {
			field, msg = "advisorresponse", rest
		} else {
			msg = strings.TrimPrefix(msg, "advisorrequest: ")
		}
		first = lb.Errorf(field, k.String(), "the %s advisor of port %d could not use it: %s", a.Name, a.Port, msg)
		firstKey = order
	}
	for k, kind := range ch.Servers {
		if kind != Added && kind != Changed {
			continue
		}
		s, ok := serverOf(next, k)
		if !ok || (s.AdvisorRequest == "" && s.AdvisorResponse == "") {
			continue
		}
		if old, ok := serverOf(base, k); ok && kind == Changed &&
			old.AdvisorRequest == s.AdvisorRequest && old.AdvisorResponse == s.AdvisorResponse {
			continue
		}
		for _, a := range next.Advisors {
			if a.Covers(k.Service.Cluster, k.Service.Port) {
				one(a, k, s)
			}
		}
	}
	for _, a := range next.Advisors {
		if ch.Advisors[a.Key()] != Added {
			continue
		}
		for ci := range next.Clusters {
			cl := &next.Clusters[ci]
			pi, ok := findPort(cl.Ports, a.Port)
			if !ok || !a.Covers(cl.Address, a.Port) {
				continue
			}
			for si := range cl.Ports[pi].Servers {
				s := &cl.Ports[pi].Servers[si]
				one(a, lb.BackendKey{Service: lb.ServiceKey{Cluster: cl.Address, Port: a.Port}, Server: s.Address}, s)
			}
		}
	}
	if first != nil {
		return first
	}
	return nil
}

// serverOf returns the server of key k in cfg, and whether it exists.
func serverOf(cfg lb.Config, k lb.BackendKey) (*lb.Server, bool) {
	ci, ok := findCluster(cfg.Clusters, k.Service.Cluster)
	if !ok {
		return nil, false
	}
	cl := &cfg.Clusters[ci]
	pi, ok := findPort(cl.Ports, k.Service.Port)
	if !ok {
		return nil, false
	}
	si, ok := findServer(cl.Ports[pi].Servers, k.Server)
	if !ok {
		return nil, false
	}
	return &cl.Ports[pi].Servers[si], true
}
