package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/client"
)

// traceClient is a dlbClient that runs packet traces (client.Client is).
type traceClient interface {
	Trace(ctx context.Context, q client.TraceQuery, packet func(api.TracePacket) error) (api.TraceEnd, error)
}

const traceLong = `Sample the packets the executor handles, with what it did to each: its
verdict (pass to the host stack, drop, tx back out of the interface, redirect
to another), the reason it was counted under (as in "executor report"), the
server it went to, and whether it followed an entry of the connection table
(conn hit) or was scheduled (conn new). One line per packet; with -w, a
pcapng file that tcpdump and Wireshark read instead.

The filter is applied in the executor, so that a trace of a few packets
costs little however busy the dispatcher is:

  --cluster VIP[@PORT]  packets of the cluster's connections: those sent to
                        (or, NAT replies, from) a server of the cluster's
                        ports (as they are when the trace starts), and those
                        to the cluster address that went to no server
  --server ADDR         packets sent to (or, NAT replies, from) the server,
                        and those from ADDR that went to no server
  --reason R            packets counted under reason R (repeat, or separate
                        with commas)

A host name may stand for the cluster's or the server's address: dlbctl
resolves it once, as for every target.

The trace stops after --count packets, after --duration, or on Ctrl-C. One
trace runs at a time. The frames are shown as the executor sent them on: a
NAT-forwarded frame with its translated addresses and ports.

In the pcapng file each packet's verdict, reason, server and connection
lookup are its comment (opt_comment: Wireshark shows it as the packet
comment; tcpdump -r reads the file and ignores comments), and each frame
holds its first 128 bytes (its captured length; the original length is
kept). Time stamps have nanosecond resolution.`

func (a *app) executorTraceCmd() *cobra.Command {
	var (
		cluster, server, file string
		reasons               []string
		count                 int
		duration              time.Duration
	)
	c := &cobra.Command{
		Use:   "trace [--cluster VIP[@PORT]] [--server ADDR] [--reason R] [--count N] [--duration D] [-w FILE.pcapng]",
		Short: "Trace packets through the executor: verdict, reason, server, connection table",
		Long:  traceLong,
		Example: `  dlbctl executor trace --cluster 198.18.0.100@80 --count 20
  dlbctl executor trace --reason drop_no_backend,drop_no_tx_port --duration 30s
  dlbctl executor trace --server 198.18.0.21 --count 100 -w trace.pcapng`,
		Args: noArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			q := client.TraceQuery{Server: server, Reasons: reasons, Count: count, Duration: duration}
			if count < 0 {
				return usagef("--count %d: want 0 (no limit) or more", count)
			}
			if duration < 0 {
				return usagef("--duration %s: want 0 (no limit) or more", duration)
			}
			if cluster != "" {
				spec := cluster
				if host, port, hasPort := strings.Cut(cluster, "@"); isHostName(host) {
					addr, err := a.resolve(cmd.Context(), "--cluster", host, 0)
					if err != nil {
						return err
					}
					if spec = addr.String(); hasPort {
						spec += "@" + port
					}
				}
				addr, port, err := parseTraceCluster(spec)
				if err != nil {
					return usagef("--cluster %q: %v", cluster, err)
				}
				q.Cluster, q.Port = addr.String(), port
			}
			if isHostName(server) {
				addr, err := a.resolve(cmd.Context(), "--server", server, 0)
				if err != nil {
					return err
				}
				q.Server = addr.String()
			} else if server != "" {
				if _, err := netip.ParseAddr(server); err != nil {
					return usagef("--server %q: not an IP address or host name", server)
				}
			}
			tc, ok := a.client().(traceClient)
			if !ok {
				return errors.New("this dlbctl's client cannot trace")
			}
			return a.trace(cmd.Context(), tc, q, file)
		}),
	}
	f := c.Flags()
	f.StringVar(&cluster, "cluster", "", "trace the packets of this cluster (VIP, or VIP@PORT; a host name stands for its address)")
	f.StringVar(&server, "server", "", "trace the packets to and from this server (an address or a host name)")
	f.StringSliceVar(&reasons, "reason", nil, "trace the packets counted under these reasons (as in executor report)")
	f.IntVar(&count, "count", 0, "stop after this many packets (0: no limit)")
	f.DurationVar(&duration, "duration", 0, "stop after this long, e.g. 30s (0: no limit)")
	f.StringVarP(&file, "write", "w", "", "write the packets to this pcapng file instead of printing them")
	return c
}

// parseTraceCluster reads VIP or VIP@PORT.
func parseTraceCluster(s string) (netip.Addr, uint16, error) {
	host, port, hasPort := strings.Cut(s, "@")
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("%q is not an IP address", host)
	}
	if !hasPort {
		return addr.Unmap(), 0, nil
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return netip.Addr{}, 0, fmt.Errorf("%q is not a port (1-65535)", port)
	}
	return addr.Unmap(), uint16(p), nil
}

// trace runs the trace and prints its packets, or writes them to file.
func (a *app) trace(ctx context.Context, tc traceClient, q client.TraceQuery, file string) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	var pw *pcapngWriter
	var out *os.File
	if file != "" {
		var err error
		if out, err = os.Create(file); err != nil {
			return fmt.Errorf("creating the trace file: %w", err)
		}
		defer out.Close()
		if pw, err = newPcapngWriter(out, "dlb executor trace"); err != nil {
			return fmt.Errorf("writing %s: %w", file, err)
		}
	}
	w := a.env.stdout
	n := 0
	q.Started = func() { fmt.Fprintln(a.env.stderr, "tracing; Ctrl-C stops") }
	end, err := tc.Trace(ctx, q, func(p api.TracePacket) error {
		n++
		switch {
		case pw != nil:
			return pw.writePacket(p)
		case a.output == "json":
			b, err := json.Marshal(p)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(w, "%s\n", b)
			return err
		default:
			_, err := io.WriteString(w, traceLine(p)+"\n")
			return err
		}
	})
	interrupted := err != nil && ctx.Err() != nil
	if err != nil && !interrupted {
		return err
	}
	if out != nil {
		if err := out.Close(); err != nil {
			return fmt.Errorf("writing %s: %w", file, err)
		}
	}
	summary := fmt.Sprintf("%d packets traced", n)
	if !interrupted {
		summary += fmt.Sprintf(" (the executor handed over %d, lost %d to a full trace buffer)", end.Packets, end.Lost)
	}
	if file != "" {
		summary += ", written to " + file
	}
	fmt.Fprintln(a.env.stderr, summary)
	if end.Error != "" {
		return fmt.Errorf("the trace ended early: %s", end.Error)
	}
	return nil
}

// traceLine renders a packet as one line, tcpdump style:
//
//	17:49:42.630454 if2 198.18.1.10:8105 > 198.18.0.120:80 tcp S len 60: tx fwd_tx server 198.18.3.2 conn new
func traceLine(p api.TracePacket) string {
	var b strings.Builder
	ts := p.Time
	if t, err := time.Parse(time.RFC3339Nano, p.Time); err == nil {
		ts = t.Local().Format("15:04:05.000000")
	}
	fmt.Fprintf(&b, "%s if%d ", ts, p.Interface)
	if p.Src == "" {
		b.WriteString("non-IP")
	} else {
		fmt.Fprintf(&b, "%s > %s %s", p.Src, p.Dst, p.Proto)
		if p.TCPFlags != "" {
			b.WriteString(" " + p.TCPFlags)
		}
	}
	fmt.Fprintf(&b, " len %d: %s %s", p.Length, p.Verdict, p.Reason)
	if p.Server != "" {
		b.WriteString(" server " + p.Server)
		if p.Hit {
			b.WriteString(" conn hit")
		} else {
			b.WriteString(" conn new")
		}
	}
	return b.String()
}

// traceComment is a packet's pcapng comment.
func traceComment(p api.TracePacket) string {
	s := fmt.Sprintf("dlb: verdict=%s reason=%s", p.Verdict, p.Reason)
	if p.Server != "" {
		conn := "new"
		if p.Hit {
			conn = "hit"
		}
		s += fmt.Sprintf(" server=%s conn=%s", p.Server, conn)
	}
	return s + fmt.Sprintf(" ifindex=%d", p.Interface)
}
