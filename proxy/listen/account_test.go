package listen

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// Every byte counts, small ones too: many small takes reach the caps as
// one large one does (the MessageBudget counted only messages ≥ 1 MiB),
// and the error names the cap hit.
func TestAccountCountsSmallTakes(t *testing.T) {
	a := NewAccount(10<<10, 16<<10)
	c1, c2 := a.Conn(), a.Conn()
	for range 10 {
		if err := c1.Take(1 << 10); err != nil {
			t.Fatalf("a take under the connection's cap was refused: %v", err)
		}
	}
	var over *OverError
	if err := c1.Take(1); !errors.As(err, &over) || !over.Conn || over.Cap != 10<<10 || over.Held != 10<<10 {
		t.Errorf("over its own cap: %v; want the connection's cap named", err)
	}
	for range 6 {
		if err := c2.Take(1 << 10); err != nil {
			t.Fatalf("a take under the caps was refused: %v", err)
		}
	}
	err := c2.Take(1)
	if !errors.As(err, &over) || over.Conn || over.Cap != 16<<10 {
		t.Errorf("over the total: %v; want the total's cap named", err)
	}
	if !strings.Contains(err.Error(), "cap of 16384 bytes for all its connections at once") {
		t.Errorf("error %q", err)
	}
	named := Named(err, "a message of 1 bytes")
	if !strings.HasPrefix(named.Error(), "a message of 1 bytes: over the proxy's cap of 16384 bytes for all") || err.Error() == named.Error() {
		t.Errorf("named %q (from %q)", named, err)
	}
	if e := io.EOF; Named(e, "x") != e {
		t.Error("Named changed an error that is no OverError")
	}
}

// Nothing is released beyond what was taken: a double release, or a tab
// done twice, lends no other connection bytes still held; a share given
// back comes back; a closed connection takes nothing more (its reader,
// still running, would never give it back); a nil share (a server's
// side) takes anything.
func TestAccountNeverReleasesMoreThanTaken(t *testing.T) {
	a := NewAccount(1<<20, 1<<20)
	c1, c2 := a.Conn(), a.Conn()
	c1.Take(100)
	c2.Take(100)
	c1.Release(500)
	c1.Release(100)
	if a.Used() != 100 || c2.Held() != 100 {
		t.Fatalf("used %d, c2 holds %d; want 100 and 100", a.Used(), c2.Held())
	}
	tab := c2.Tab()
	tab.Take(50)
	tab.Done()
	tab.Done()
	if c2.Held() != 100 {
		t.Errorf("after a tab done twice c2 holds %d; want 100", c2.Held())
	}
	if err := c1.Take(1<<20 - 100); err != nil {
		t.Errorf("what c1 gave back did not come back: %v", err)
	}
	c1.Close()
	c2.Close()
	var over *OverError
	if err := c2.Take(1); a.Used() != 0 || !errors.As(err, &over) || !over.Closed {
		t.Errorf("after close: used %d; a closed connection's take: %v", a.Used(), err)
	}
	var none *ConnAccount
	if none.Take(1<<40) != nil || none.Tab().Take(1<<40) != nil {
		t.Error("a nil share refused")
	}
	none.Release(1)
	none.Tab().Done()
}

// pair is a connected client and server side on loopback.
func pair(t *testing.T) (client, server net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// timesOut reports whether a read of r fails with a timeout within d.
func timesOut(r io.Reader, within time.Duration) bool {
	start := time.Now()
	_, err := r.Read(make([]byte, 1))
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() && time.Since(start) < within
}

// The clock closes a connection that never finished its handshake, one
// idle while nothing is owed, and one that began a message and stalled;
// while an answer is owed it waits.
func TestClockDeadlines(t *testing.T) {
	lim := Limits{Handshake: 50 * time.Millisecond, Idle: 100 * time.Millisecond, Message: 80 * time.Millisecond}
	_, s := pair(t)
	NewClock(s, lim)
	if !timesOut(s, time.Second) {
		t.Error("no handshake: the read did not time out")
	}
	_, s = pair(t)
	k := NewClock(s, lim)
	k.Await(true)
	if !timesOut(s, time.Second) {
		t.Error("idle: the read did not time out")
	}
	_, s = pair(t)
	k = NewClock(s, lim)
	k.Await(true)
	k.Begin()
	if !timesOut(s, time.Second) {
		t.Error("a stalled message: the read did not time out")
	}
	c, s := pair(t)
	k = NewClock(s, lim)
	k.Await(true)
	k.Owe()
	go func() { time.Sleep(300 * time.Millisecond); c.Write([]byte{1}) }()
	if _, err := s.Read(make([]byte, 1)); err != nil {
		t.Errorf("an answer owed: the client's silence timed out: %v", err)
	}
}

// Idle counts bytes either way when the proxy touches the clock with the
// server's (AMQP, NATS: a consumer the server delivers to is alive): the
// client's Reader goes on past a deadline a touch moved, and fails once
// nothing crossed for the limit (a limit four beats long: a loaded machine
// may wake the beating goroutine late). SetIdle changes the limit as a protocol
// negotiates it (AMQP: twice the heartbeat); the handshake's deadline is
// never moved by a touch.
func TestClockIdleCountsBothWays(t *testing.T) {
	client, s := pair(t)
	k := NewClock(s, Limits{Idle: 400 * time.Millisecond})
	srv, up := pair(t)
	fromServer := k.Touching(up)
	go func() {
		for range 12 {
			time.Sleep(100 * time.Millisecond)
			srv.Write([]byte{1})
			fromServer.Read(make([]byte, 1))
		}
	}()
	start := time.Now()
	if !timesOut(k.Reader(), 3*time.Second) {
		t.Fatal("nothing either way: the read did not time out")
	}
	if d := time.Since(start); d < 1200*time.Millisecond {
		t.Errorf("cut after %v while the server's bytes crossed every 100 ms for 1.2 s (the limit 400 ms)", d)
	}
	k.SetIdle(0)
	go func() { time.Sleep(300 * time.Millisecond); client.Write([]byte{1}) }()
	if _, err := k.Reader().Read(make([]byte, 1)); err != nil {
		t.Errorf("idle 0 is no limit: %v", err)
	}
	_, s = pair(t)
	k = NewClock(s, Limits{Handshake: 100 * time.Millisecond})
	go func() {
		for range 10 {
			time.Sleep(30 * time.Millisecond)
			k.Touch()
		}
	}()
	if !timesOut(k.Reader(), time.Second) {
		t.Error("touches moved the handshake's deadline")
	}
	k.Shaken()
}
