package testutil

import (
	"bytes"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// Listener is a throwaway TCP server on loopback: each connection gets
// serve, and is closed when serve returns. It stops with the test.
func Listener(t testing.TB, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); serve(c) }()
		}
	}()
	return ln.Addr().String()
}

// Flood writes prefix, then total bytes of unit (from one reused buffer),
// as a hostile client would, and gives up quietly once the peer closes.
func Flood(c net.Conn, prefix, unit string, total int) {
	if _, err := io.WriteString(c, prefix); err != nil {
		return
	}
	buf := bytes.Repeat([]byte(unit), max(1, (1<<20)/len(unit)))
	for sent := 0; sent < total; sent += len(buf) {
		if _, err := c.Write(buf[:min(len(buf), total-sent)]); err != nil {
			return
		}
	}
}

// ReadToClose reads what the peer sends until it closes the connection
// (a reset counts as a close); 20 s without it fails the test.
func ReadToClose(t testing.TB, c net.Conn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	var out bytes.Buffer
	_, err := io.Copy(&out, c)
	if err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "connection reset") {
		t.Fatalf("after %q: %v (the peer never closed)", out.String(), err)
	}
	return out.String()
}

// ReportP50 reports a benchmark's round trips, direct and through a proxy
// (measured in turn, so that both saw the same machine load): each p50,
// and what the proxy added to it.
func ReportP50(b *testing.B, direct, proxied []time.Duration) {
	p50 := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Nanoseconds()) / 1e3
	}
	d, px := p50(direct), p50(proxied)
	b.ReportMetric(d, "direct-p50-µs")
	b.ReportMetric(px, "proxy-p50-µs")
	b.ReportMetric(px-d, "added-p50-µs")
}
