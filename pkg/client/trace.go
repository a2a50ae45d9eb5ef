package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
)

// TraceQuery is a packet trace's filter and limits (api.PathTrace).
type TraceQuery struct {
	// Cluster and Port, Server, Reasons: the filter (empty: any).
	Cluster string
	Port    uint16
	Server  string
	Reasons []string
	// Count stops the trace after this many packets; Duration after this
	// long (0: no limit).
	Count    int
	Duration time.Duration
	// Started, when set, is called once dlbd traces.
	Started func()
}

// ErrTraceEnded is returned by Trace when the stream ended without its
// end line (dlbd went away).
var ErrTraceEnded = errors.New("the trace's stream ended early")

// Trace runs a packet trace and calls packet with every traced packet as
// it comes; it returns the trace's end line. The trace stops when ctx is
// done (dlbd notices the connection close), when packet returns an error
// (returned), or at the query's count or duration. Unlike other calls it
// has no overall timeout.
func (c *Client) Trace(ctx context.Context, q TraceQuery, packet func(api.TracePacket) error) (api.TraceEnd, error) {
	v := url.Values{}
	if q.Cluster != "" {
		v.Set("cluster", q.Cluster)
	}
	if q.Port != 0 {
		v.Set("port", strconv.Itoa(int(q.Port)))
	}
	if q.Server != "" {
		v.Set("server", q.Server)
	}
	for _, r := range q.Reasons {
		v.Add("reason", r)
	}
	if q.Count > 0 {
		v.Set("count", strconv.Itoa(q.Count))
	}
	if q.Duration > 0 {
		v.Set("duration", q.Duration.String())
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+api.PathTrace+"?"+v.Encode(), nil)
	if err != nil {
		return api.TraceEnd{}, fmt.Errorf("building request: %w", err)
	}
	c.authorize(req)
	hc := &http.Client{Transport: c.hc.Transport} // no timeout: a trace lasts as long as it is asked to
	req, sent := sending(req)
	resp, err := hc.Do(req)
	if err != nil {
		return api.TraceEnd{}, c.sendError(err, 0, sent.Load())
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		re := &RefusedError{Status: resp.StatusCode, API: api.Error{Op: -1}}
		if err := json.Unmarshal(data, &re.API); err != nil || re.API.Message == "" {
			re.API.Message = fmt.Sprintf("dlbd answered %s: %s", resp.Status, bytes.TrimSpace(data))
		}
		return api.TraceEnd{}, re
	}
	if q.Started != nil {
		q.Started()
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l api.TraceLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return api.TraceEnd{}, fmt.Errorf("decoding a trace line: %w", err)
		}
		switch {
		case l.End != nil:
			return *l.End, nil
		case l.Packet != nil:
			if err := packet(*l.Packet); err != nil {
				return api.TraceEnd{}, err
			}
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return api.TraceEnd{}, fmt.Errorf("reading the trace: %w", err)
	}
	if ctx.Err() != nil {
		return api.TraceEnd{}, ctx.Err()
	}
	return api.TraceEnd{}, ErrTraceEnded
}
