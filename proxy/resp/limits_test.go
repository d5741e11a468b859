package resp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/outboxdrill/runner/internal/testutil"
	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/proxy/listen"
)

// dial opens a raw connection to the proxy.
func (f *fixture) dial() net.Conn {
	f.t.Helper()
	c, err := net.Dial("tcp", f.proxy.Addr())
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close() })
	return c
}

// send writes total bytes of unit (from one reused buffer), as a hostile
// client would, and gives up quietly once the proxy closes.
func send(c net.Conn, prefix, unit string, total int) {
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

// readAll reads what the proxy sends until it closes the connection.
func readAll(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	var out bytes.Buffer
	_, err := io.Copy(&out, c)
	if err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "connection reset") {
		t.Fatalf("after %q: %v (the proxy never closed)", out.String(), err)
	}
	return out.String()
}

// A command nested 8M arrays deep crashed the proxy with a stack
// overflow (and the whole test binary with it): a command is an array of
// bulk strings, as Redis says.
func TestDeepNestingIsAProtocolError(t *testing.T) {
	f := newFixture(t)
	c := f.dial()
	go send(c, "", "*1\r\n", 32<<20)
	if got, want := readAll(t, c), "-ERR Protocol error: expected '$', got '*'\r\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if err := f.client(2).Ping(context.Background()).Err(); err != nil {
		t.Errorf("the proxy after the attack: %v", err)
	}
}

func TestProtocolErrorsAreRedis(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct{ in, want string }{
		{"*1\r\n:1\r\n", "-ERR Protocol error: expected '$', got ':'\r\n"},
		{"*2147483648\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{fmt.Sprintf("*%d\r\n", MaxArgs+1), "-ERR Protocol error: invalid multibulk length\r\n"},
		{"*1\r\n$-1\r\n", "-ERR Protocol error: invalid bulk length (the outboxdrill proxy takes at most 67108864 bytes)\r\n"},
		// Replies to what came before come first.
		{"PING\r\n*1\r\n*1\r\n", "+PONG\r\n-ERR Protocol error: expected '$', got '*'\r\n"},
	} {
		c := f.dial()
		if _, err := io.WriteString(c, tc.in); err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, c); got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.in, got, tc.want)
		}
	}
}

// $536870912 made the proxy allocate 512 MB before a byte of it came.
func TestHugeBulkIsRefusedUpFront(t *testing.T) {
	f := newFixture(t)
	var got string
	n := testutil.Allocated(func() {
		c := f.dial()
		go send(c, "*2\r\n$3\r\nGET\r\n$536870912\r\n", "x", 1<<20)
		got = readAll(t, c)
	})
	if want := "-ERR Protocol error: invalid bulk length (the outboxdrill proxy takes at most 67108864 bytes)\r\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if n > 16<<20 {
		t.Errorf("the attack allocated %d MB, want under 16", n>>20)
	}
}

// A bulk string under the cap costs what arrived of it, not what its
// length announced.
func TestBulkCostsWhatArrived(t *testing.T) {
	f := newFixture(t)
	n := testutil.Allocated(func() {
		c := f.dial()
		send(c, fmt.Sprintf("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n", MaxRequest-100), "x", 1<<20)
		c.(*net.TCPConn).CloseWrite()
		readAll(t, c)
	})
	if n > 16<<20 {
		t.Errorf("1 MB of a 64 MB bulk allocated %d MB, want under 16", n>>20)
	}
}

// A command over the cap is refused, however its arguments add up.
func TestCommandOverTheCap(t *testing.T) {
	f := newFixture(t)
	c := f.dial()
	half := MaxRequest / 2
	go send(c, fmt.Sprintf("*4\r\n$4\r\nMSET\r\n$1\r\nk\r\n$%d\r\n%s\r\n$%d\r\n", half, strings.Repeat("x", half), half), "x", half+2)
	if got, want := readAll(t, c), "-ERR Protocol error: a command of more than 67108864 bytes (the outboxdrill proxy's cap)\r\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// An inline line with no newline was buffered whole (256 MB of it).
func TestInlineWithoutNewline(t *testing.T) {
	f := newFixture(t)
	var got string
	n := testutil.Allocated(func() {
		c := f.dial()
		go send(c, "", "A", 16<<20)
		got = readAll(t, c)
	})
	if want := "-ERR Protocol error: too big inline request\r\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if n > 8<<20 {
		t.Errorf("16 MB without a newline allocated %d MB, want under 8", n>>20)
	}
	// A line of the limit's length is a command.
	c := f.dial()
	fmt.Fprintf(c, "ECHO %s\r\n", strings.Repeat("a", MaxInline-len("ECHO ")))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != fmt.Sprintf("$%d\r\n", MaxInline-len("ECHO ")) {
		t.Errorf("an inline command of %d bytes: %q %v", MaxInline, line, err)
	}
}

// The deepest reply a real Redis sends (a Lua script's cyclic table, cut
// off at its Lua stack limit) still passes.
func TestDeepestRealReplyPasses(t *testing.T) {
	f := newFixture(t)
	c := f.dial()
	script := "local a = {}; local b = {a}; a[1] = b; return a"
	fmt.Fprintf(c, "*3\r\n$4\r\nEVAL\r\n$%d\r\n%s\r\n$1\r\n0\r\nPING\r\n", len(script), script)
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(c)
	depth := 0
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("after %d levels: %v", depth, err)
		}
		if line != "*1\r\n" {
			if line != "-ERR reached lua stack limit\r\n" {
				t.Fatalf("after %d levels: %q", depth, line)
			}
			break
		}
		depth++
	}
	if depth < 1000 {
		t.Errorf("Redis nested only %d levels", depth)
	}
	if line, err := r.ReadString('\n'); line != "+PONG\r\n" {
		t.Errorf("PING after it: %q %v", line, err)
	}
	t.Logf("a reply %d levels deep passed", depth)
}

func TestReplyDepthLimit(t *testing.T) {
	deep := func(levels int) string { return strings.Repeat("*1\r\n", levels) + ":7\r\n" }
	r := newReplyReader(strings.NewReader(deep(MaxReplyDepth)+deep(MaxReplyDepth+1)), nil)
	v, _, err := r.next()
	if err != nil {
		t.Fatalf("%d levels: %v", MaxReplyDepth, err)
	}
	for range MaxReplyDepth {
		if len(v.Elems) != 1 {
			t.Fatalf("lost a level: %v", v)
		}
		v = v.Elems[0]
	}
	if v.Str != "7" {
		t.Errorf("innermost %q", v.Str)
	}
	if _, _, err := r.next(); !errors.Is(err, errTooDeep) {
		t.Errorf("%d levels: %v, want errTooDeep", MaxReplyDepth+1, err)
	}
}

// A reply over the buffer is not refused: it streams on, unheld, and a
// trigger on it fails as unclassifiable instead of striking.
func TestLargeReplyStreams(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	key := f.stream + ":big"
	big := strings.Repeat("v", MaxReplyBuffer+1<<20)
	if err := f.direct.Set(ctx, key, big, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	defer f.direct.Del(ctx, key)
	a := f.arm(fault.Trigger{Link: fault.Broker, Boundary: fault.Reply, Filter: fault.Filter{Command: "GET"}, Action: fault.Action{Do: fault.Cut}})
	c := f.client(3)
	// A 65 MB reply on a loaded machine may take longer than go-redis's
	// default 3 s read timeout; this test is about streaming, not speed.
	c.Options().ReadTimeout = -1
	start := time.Now()
	got, err := c.Get(ctx, key).Result()
	t.Logf("GET of %d bytes through the proxy took %s", len(got), time.Since(start))
	if err != nil || got != big {
		t.Fatalf("GET through the proxy: %d bytes, %v", len(got), err)
	}
	var u *fault.Unclassifiable
	if !errors.As(a.Err(), &u) {
		t.Errorf("the trigger: %v, want unclassifiable", a.Err())
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Errorf("after it: %v", err)
	}
	ev := f.proxy.Events()
	if last := ev[len(ev)-2]; !last.Reply.Streamed || last.Command[0] != "get" {
		t.Errorf("recorded %v %v, want GET's reply streamed", last.Command, last.Reply)
	}
}

// Past the cap on connections, a client is told as Redis tells it.
func TestConnectionCap(t *testing.T) {
	f := newFixture(t)
	ping := func() (net.Conn, string) {
		c := f.dial()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		io.WriteString(c, "PING\r\n")
		line, err := bufio.NewReader(c).ReadString('\n')
		if line != "+PONG\r\n" {
			c.Close() // a refused client leaves, and frees its refusal
		}
		if err != nil {
			return c, err.Error()
		}
		return c, line
	}
	var first net.Conn
	for i := range listen.MaxConns {
		c, got := ping()
		if got != "+PONG\r\n" {
			t.Fatalf("client %d: %q", i+1, got)
		}
		if first == nil {
			first = c
		}
	}
	c := f.dial()
	io.WriteString(c, "PING\r\n")
	if got, want := readAll(t, c), "-ERR max number of clients reached\r\n"; got != want {
		t.Fatalf("client %d: %q, want %q and the connection closed", listen.MaxConns+1, got, want)
	}
	first.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, got := ping(); got == "+PONG\r\n" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("after a client left: %q", got)
		}
	}
}

// Every command was recorded whole for the rest of the run: a client
// SETting 8 MB values kept 8 MB each alive. The proxy keeps whole only
// what the history reads, and a bounded count of the rest.
func TestRecordKeepsWhatTheHistoryReads(t *testing.T) {
	lim := DefaultLimits()
	lim.MaxOtherEvents = 50
	f := limitedFixture(t, lim)
	ctx := context.Background()
	c := f.client(2)
	big := strings.Repeat("v", 8<<20)
	key := f.stream + ":big"
	defer f.direct.Del(ctx, key)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 8 {
		if err := c.Set(ctx, key, big, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 16<<20 {
		t.Errorf("8 SETs of 8 MB left %d MB alive, want under 16", grew>>20)
	}
	if err := xadd(ctx, c, f.stream, "e1").Err(); err != nil {
		t.Fatal(err)
	}
	c.Do(ctx, "AUTH", "nobody", "s3cret")
	pipe := c.Pipeline()
	for range 100 {
		pipe.Ping(ctx)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	others, sets, auths := 0, 0, 0
	for _, e := range f.proxy.Events() {
		switch strings.ToUpper(e.Command[0]) {
		case "XADD":
			if len(e.Command) < 4 || e.Reply.Str == "" {
				t.Errorf("XADD recorded as %q → %v, want whole", e.Command, e.Reply)
			}
			continue
		case "SET":
			sets++
			if len(e.Command) != 1 || e.Reply.Type != '+' || e.Reply.Str != "" {
				t.Errorf("SET recorded as %d words → %q %q, want its name and its reply's kind", len(e.Command), e.Reply.Type, e.Reply.Str)
			}
		case "AUTH":
			auths++
			if len(e.Command) != 1 || !e.Reply.Err() || e.Reply.Str == "" {
				t.Errorf("AUTH recorded as %d words → %q %q, want its name and its error", len(e.Command), e.Reply.Type, e.Reply.Str)
			}
		}
		others++
	}
	if others != 50 || sets != 8 || auths != 1 {
		t.Errorf("kept %d events of other commands (%d SET, %d AUTH), want 50 (8, 1)", others, sets, auths)
	}
	if pubs, _, _ := f.proxy.History(); len(pubs) != 1 {
		t.Errorf("history: %d publishes, want 1", len(pubs))
	}
}

// TestEventSizeCountsWhatItKeeps: the record's bound (fault.Sized) counts
// an XADD's payload and a read's reply, where a looping client's bytes go.
func TestEventSizeCountsWhatItKeeps(t *testing.T) {
	big := strings.Repeat("p", 1<<20)
	pub := Event{Command: []string{"XADD", "s", "*", "payload", big}, Reply: Value{Type: '$', Str: "1-0"}}
	read := Event{Command: []string{"XREADGROUP"}, Reply: Value{Type: '*', Elems: []Value{{Type: '$', Str: big}, {Type: '$', Str: big}}}}
	if n, keep := pub.RecordSize(); n < 1<<20 || keep {
		t.Errorf("an XADD of 1 MB counts %d bytes (keep %v)", n, keep)
	}
	if n, _ := read.RecordSize(); n < 2<<20 {
		t.Errorf("a reply of 2 MB counts %d bytes", n)
	}
	if _, keep := (Event{Fault: "broker.reply(XADD) do=error"}).RecordSize(); !keep {
		t.Error("a strike is not kept whatever the bound")
	}
}

// TestAHalfClosedClientGetsItsReplies: a client that sends, then shuts
// its writing side down (nc, printf | redis-cli) gets the replies, as from
// Redis; the proxy closed both ways at its EOF.
func TestAHalfClosedClientGetsItsReplies(t *testing.T) {
	f := newFixture(t)
	c := f.dial()
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	if got := readAll(t, c); got != "+PONG\r\n" {
		t.Errorf("got %q, want +PONG", got)
	}
}

// limitedFixture is a fixture whose proxy has limits of its own.
func limitedFixture(t *testing.T, lim Limits) *fixture {
	t.Helper()
	f := newFixture(t)
	p, err := ListenWith(f.opts.Addr, lim)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	f.proxy = p
	return f
}

// TestLargeCommandsShareOneBudget: one connection's 60 MB under the cap
// is fine, but 20 of them grew the runner to 2.4 GB: the commands of all
// a proxy's connections share its account (every byte as it arrives,
// issue 41; the MessageBudget counted only commands of 1 MiB or more). A
// command refused for it gets Redis's kind of error naming the cap; one
// connection holding its share leaves the others their small commands.
func TestLargeCommandsShareOneBudget(t *testing.T) {
	f := limitedFixture(t, Limits{Limits: listen.Limits{ConnBytes: 4 << 20, TotalBytes: 3 << 20}})
	first := f.dial()
	// 4 MB announced, 2 MB sent: the first holds 2 MB of the 3.
	go send(first, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4000000\r\n", "x", 2<<20)
	testutil.Within(t, 10*time.Second, "2 MB arrived", func() {
		for f.proxy.acct.Used() < 2<<20 {
			time.Sleep(10 * time.Millisecond)
		}
	})
	second := f.dial()
	go send(second, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1500000\r\n", "x", 1500000)
	if got := readAll(t, second); !strings.HasPrefix(got, "-ERR Protocol error: a command: over the proxy's cap of 3145728 bytes for all its connections at once") {
		t.Errorf("a second command of 1.5 MB while the first holds 2 MB of 3: %q", got)
	}
	small := f.dial()
	io.WriteString(small, "PING\r\n")
	small.(*net.TCPConn).CloseWrite()
	if got := readAll(t, small); got != "+PONG\r\n" {
		t.Errorf("a small command beside them: %q", got)
	}
}

// Every byte of a command counts, small commands too: its bytes and its
// words copied out, within the connection's cap, until its reply came;
// then the account is empty.
func TestEveryCommandIsOnTheAccount(t *testing.T) {
	f := limitedFixture(t, Limits{Limits: listen.Limits{ConnBytes: 1 << 20, TotalBytes: 64 << 20}})
	c := f.dial()
	fmt.Fprintf(c, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n%s\r\n", 400<<10, strings.Repeat("x", 400<<10))
	rd := bufio.NewReader(c)
	if line, err := rd.ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("a command of 400 kB (800 kB with its words) under a cap of 1 MB: %q %v", line, err)
	}
	testutil.Within(t, 5*time.Second, "the account emptied once answered", func() {
		for f.proxy.acct.Used() != 0 {
			time.Sleep(10 * time.Millisecond)
		}
	})
	go send(c, fmt.Sprintf("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n", 600<<10), "x", 600<<10+2)
	if got := readAll(t, c); !strings.HasPrefix(got, "-ERR Protocol error: a command: over the proxy's cap of 1048576 bytes for one connection") {
		t.Errorf("a command of 600 kB (1.2 MB with its words): %q", got)
	}
}

// Deadlines are none by default (Redis's timeout 0); set, Idle cuts a
// client silent while it is owed nothing, never one blocked for its reply.
func TestIdleNeverCutsABlockedRead(t *testing.T) {
	if d := DefaultLimits(); d.Handshake != 0 || d.Idle != 0 {
		t.Errorf("default limits %+v: want no deadlines", d)
	}
	f := limitedFixture(t, Limits{Limits: listen.Limits{ConnBytes: 1 << 20, TotalBytes: 1 << 20, Idle: time.Second}})
	c := f.dial()
	io.WriteString(c, "*4\r\n$5\r\nBLPOP\r\n$8\r\nno-such-\r\n$1\r\n0\r\n$3\r\n2.5\r\n")
	rd := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if line, err := rd.ReadString('\n'); err != nil || line != "*-1\r\n" {
		t.Fatalf("a BLPOP blocked 2.5 s under an Idle of 1 s: %q %v", line, err)
	}
	start := time.Now()
	if _, err := rd.ReadByte(); err == nil || time.Since(start) > 5*time.Second {
		t.Errorf("a client silent past Idle: %v after %v, want closed after about 1 s", err, time.Since(start))
	}
}
