package listen

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// echo is a protocol that answers each line with "ok <id>".
type echo struct {
	id int
	c  net.Conn
}

func (e *echo) Close() { e.c.Close() }

func serveEcho(t *testing.T) *Listener {
	t.Helper()
	l, err := Serve(Protocol{
		Open: func(id int, c net.Conn) Conn { return &echo{id: id, c: c} },
		Serve: func(c Conn) {
			e := c.(*echo)
			defer e.c.Close()
			sc := bufio.NewScanner(e.c)
			for sc.Scan() {
				fmt.Fprintf(e.c, "ok %d\n", e.id)
			}
		},
		Refuse: func(c net.Conn, max int) { fmt.Fprintf(c, "refused (cap %d)\n", max) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// ask sends a line on a new connection and returns it with the answer.
func ask(t *testing.T, l *Listener) (net.Conn, string) {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "hello\n"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	return c, strings.TrimSpace(line)
}

func TestCapRefusesInTheProtocolsWords(t *testing.T) {
	l := serveEcho(t)
	l.SetMax(2)
	first, got := ask(t, l)
	if got != "ok 1" {
		t.Fatalf("first: %q", got)
	}
	if _, got := ask(t, l); got != "ok 2" {
		t.Fatalf("second: %q", got)
	}
	third, got := ask(t, l)
	if got != "refused (cap 2)" {
		t.Fatalf("third over the cap: %q, want the refusal", got)
	}
	// The refused connection is closed after its refusal.
	if n, err := third.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("after the refusal: read %d, %v; want EOF", n, err)
	}
	if l.Refused() != 1 || l.Accepted() != 2 {
		t.Errorf("refused %d accepted %d, want 1 and 2", l.Refused(), l.Accepted())
	}
	// A slot that frees serves the next client.
	first.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, got := ask(t, l)
		if got == "ok 3" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a client left: %q, want served", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestDefaultCap(t *testing.T) {
	l := serveEcho(t)
	for i := 1; i <= MaxConns; i++ {
		if _, got := ask(t, l); got != fmt.Sprintf("ok %d", i) {
			t.Fatalf("connection %d: %q", i, got)
		}
	}
	if _, got := ask(t, l); got != fmt.Sprintf("refused (cap %d)", MaxConns) {
		t.Fatalf("connection %d: %q, want refused", MaxConns+1, got)
	}
}

func TestRefuseIsRequired(t *testing.T) {
	_, err := Serve(Protocol{Open: func(int, net.Conn) Conn { return nil }, Serve: func(Conn) {}})
	if err == nil {
		t.Fatal("a protocol without Refuse was accepted")
	}
}

// TestSharedSlotsCapListenersTogether: two proxies to one server share
// its slots; a slot comes back when its connection ends.
func TestSharedSlotsCapListenersTogether(t *testing.T) {
	a, b := serveEcho(t), serveEcho(t)
	s := NewSlots(2)
	a.ShareSlots(s)
	b.ShareSlots(s)
	ca, got := ask(t, a)
	if got != "ok 1" {
		t.Fatalf("first: %q", got)
	}
	if _, got = ask(t, b); got != "ok 1" {
		t.Fatalf("second, on the other listener: %q", got)
	}
	if _, got = ask(t, b); got != "refused (cap 2)" {
		t.Fatalf("third, over the shared cap: %q", got)
	}
	ca.Close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, got = ask(t, b); got != "refused (cap 2)" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slot of a closed connection never came back")
		}
	}
	if !strings.HasPrefix(got, "ok ") {
		t.Errorf("after a slot came back: %q", got)
	}
}
