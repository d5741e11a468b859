package listen

import (
	"errors"
	"net"
	"testing"
	"time"
)

// Every byte counts, small ones too: many small takes reach the caps as
// one large one does (the MessageBudget counted only messages ≥ 1 MiB).
func TestAccountCountsSmallTakes(t *testing.T) {
	a := NewAccount(10<<10, 16<<10)
	c1, c2 := a.Conn(), a.Conn()
	for range 10 {
		if !c1.Take(1 << 10) {
			t.Fatal("a take under the connection's cap was refused")
		}
	}
	if c1.Take(1) {
		t.Error("a connection went over its own cap")
	}
	for range 6 {
		if !c2.Take(1 << 10) {
			t.Fatal("a take under the caps was refused")
		}
	}
	if c2.Take(1) {
		t.Error("the connections together went over the total")
	}
	var over *OverError
	if err := c2.Over("a message of 1 bytes", 1); !errors.As(err, &over) || over.Conn {
		t.Errorf("Over = %v; want the total's cap named", err)
	}
	if err := c1.Over("x", 1); !errors.As(err, &over) || !over.Conn {
		t.Errorf("Over = %v; want the connection's cap named", err)
	}
}

// Nothing is released beyond what was taken: a double release, or a tab
// done twice, lends no other connection bytes still held.
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
	c2.Close()
	if a.Used() != 0 || c2.Take(1) {
		t.Errorf("after close: used %d; a closed connection took more", a.Used())
	}
}

// The clock closes a connection that never finished its handshake, one
// idle while nothing is owed, and one that began a message and stalled;
// while an answer is owed it waits.
func TestClockDeadlines(t *testing.T) {
	pair := func() (net.Conn, net.Conn) {
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
	timesOut := func(s net.Conn, within time.Duration) bool {
		start := time.Now()
		_, err := s.Read(make([]byte, 1))
		var ne net.Error
		return errors.As(err, &ne) && ne.Timeout() && time.Since(start) < within
	}
	lim := Limits{Handshake: 50 * time.Millisecond, Idle: 100 * time.Millisecond, Message: 80 * time.Millisecond}
	_, s := pair()
	NewClock(s, lim)
	if !timesOut(s, time.Second) {
		t.Error("no handshake: the read did not time out")
	}
	_, s = pair()
	k := NewClock(s, lim)
	k.Await(true)
	if !timesOut(s, time.Second) {
		t.Error("idle: the read did not time out")
	}
	_, s = pair()
	k = NewClock(s, lim)
	k.Await(true)
	k.Begin()
	if !timesOut(s, time.Second) {
		t.Error("a stalled message: the read did not time out")
	}
	c, s := pair()
	k = NewClock(s, lim)
	k.Await(true)
	k.Owe()
	go func() { time.Sleep(300 * time.Millisecond); c.Write([]byte{1}) }()
	if _, err := s.Read(make([]byte, 1)); err != nil {
		t.Errorf("an answer owed: the client's silence timed out: %v", err)
	}
}
