package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/dlbproject/dlb/pkg/connlimit"
	"github.com/dlbproject/dlb/pkg/console"
	"github.com/dlbproject/dlb/pkg/metrics"
)

// checkMetricsAddress refuses a --metrics-address that is not HOST:PORT
// ("" turns the listener off).
func checkMetricsAddress(addr string) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--metrics-address: %q is not HOST:PORT: %w", addr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("--metrics-address: %q: the port must be a number 1..65535", addr)
	}
	return nil
}

// monitorSource is what the metrics and the console read: the engine.
type monitorSource interface {
	metrics.Source
	console.Source
}

// listenMonitor opens the listener of /metrics and the web console (/),
// with connlimit's limits (scrapers and console pages are few; idle
// connections left open must not take dlbd's descriptors).
func listenMonitor(addr string, log *slog.Logger) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-address: %w", err)
	}
	return connlimit.New(l, "metrics and console", connlimit.DefaultTotal, connlimit.DefaultPerClient, log), nil
}

// newMonitorServer serves /metrics and the web console on one listener.
func newMonitorServer(src monitorSource, log *slog.Logger) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.NewHandler(src, metrics.Options{Version: version, Logger: log}))
	mux.Handle("/", console.NewHandler(src, console.Options{Version: version, Logger: log}))
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		// A scrape of 100,000 servers is tens of megabytes (a few,
		// gzipped): room for a slow scraper.
		WriteTimeout: 2 * time.Minute,
		IdleTimeout:  2 * time.Minute,
		ErrorLog:     slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}
