package progress

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/outboxdrill/runner/internal/testutil"
)

// clock is a fake clock the test moves by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)} }
func lines(b *bytes.Buffer) []string {
	return strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
}
func cfg(live bool, every time.Duration) Config {
	return Config{Noun: "points", Bad: "violation(s)", Live: live, Every: every}
}

// Not a terminal: nothing before a minute, then one line a minute with the
// counts, elapsed and the estimate, and one at the end.
func TestLinesPerIntervalWhenNotATerminal(t *testing.T) {
	var b bytes.Buffer
	c := newClock()
	r := newReporter(&b, cfg(false, 0), c.now)
	r.Add(48)
	c.advance(30 * time.Second)
	r.Done(12, 1)
	r.Tick()
	if b.Len() != 0 {
		t.Fatalf("a line before a minute passed: %q", b.String())
	}
	c.advance(30 * time.Second)
	r.Tick()
	r.Tick() // the same minute: no second line
	want := "progress: 12/48 points, 1 violation(s), 1m0s elapsed, about 3m0s left\n"
	if b.String() != want {
		t.Fatalf("after a minute:\n got %q\nwant %q", b.String(), want)
	}
	c.advance(50 * time.Second)
	r.Done(36, 0)
	r.Tick()
	r.Close()
	got := lines(&b)
	if len(got) != 2 || got[1] != "progress: 48/48 points, 1 violation(s), 1m50s elapsed (done)" {
		t.Fatalf("the end: want one last line, got %q", got)
	}
	if strings.ContainsAny(b.String(), "\r\x1b") {
		t.Fatalf("control characters without a terminal: %q", b.String())
	}
	r.Tick()
	r.Close()
	if len(lines(&b)) != 2 {
		t.Fatalf("a line after Close: %q", b.String())
	}
}

// A run shorter than the interval prints nothing: its summary says it all.
func TestShortRunPrintsNothingWhenNotATerminal(t *testing.T) {
	var b bytes.Buffer
	c := newClock()
	r := newReporter(&b, cfg(false, 5*time.Second), c.now)
	r.Add(2)
	c.advance(4 * time.Second)
	r.Done(2, 0)
	r.Tick()
	r.Close()
	if b.Len() != 0 {
		t.Fatalf("a short run printed %q", b.String())
	}
}

// A terminal: one line rewritten in place on every change and tick, erased
// around what is printed above it and for good at the end.
func TestLiveLineRewrittenInPlace(t *testing.T) {
	var b bytes.Buffer
	c := newClock()
	r := newReporter(&b, cfg(true, 0), c.now)
	r.Tick()
	if b.String() != "starting, 0s elapsed" {
		t.Fatalf("before the total is known: %q", b.String())
	}
	b.Reset()
	r.Add(4)
	c.advance(2 * time.Second)
	r.Tick()
	if want := "\r\x1b[K0/4 points, 0 violation(s), 0s elapsed, estimating what remains\r\x1b[K0/4 points, 0 violation(s), 2s elapsed, estimating what remains"; b.String() != want {
		t.Fatalf("redrawn:\n got %q\nwant %q", b.String(), want)
	}
	b.Reset()
	c.advance(2 * time.Second)
	r.Done(1, 1)
	r.Above(func() { b.WriteString("--- FAIL: one\n") })
	want := "\r\x1b[K1/4 points, 1 violation(s), 4s elapsed, about 12s left" + // Done redraws
		"\r\x1b[K--- FAIL: one\n" + // erased before the block
		"1/4 points, 1 violation(s), 4s elapsed, about 12s left" // and drawn below it
	if b.String() != want {
		t.Fatalf("around a block:\n got %q\nwant %q", b.String(), want)
	}
	b.Reset()
	r.Close()
	r.Tick()
	if b.String() != "\r\x1b[K" {
		t.Fatalf("Close: want the line erased and nothing after, got %q", b.String())
	}
}

// A nil reporter (no progress wanted) does nothing, but Above still prints.
func TestNilReporter(t *testing.T) {
	var r *Reporter
	r.Add(1)
	r.Done(1, 0)
	r.Tick()
	printed := false
	r.Above(func() { printed = true })
	r.Close()
	if !printed {
		t.Fatal("Above on a nil reporter did not print")
	}
}

// $RUNNER_PROGRESS_EVERY sets the interval (lines, also on a terminal); a
// bad value is named.
func TestEnvEvery(t *testing.T) {
	t.Setenv(EnvEvery, "2s")
	c, err := ForStderr(&bytes.Buffer{}, "points", "violation(s)")
	if err != nil || c.Every != 2*time.Second || c.Live {
		t.Fatalf("%s=2s: got %+v, %v", EnvEvery, c, err)
	}
	t.Setenv(EnvEvery, "soon")
	if _, err := ForStderr(&bytes.Buffer{}, "points", "violation(s)"); err == nil || !strings.Contains(err.Error(), `RUNNER_PROGRESS_EVERY="soon": want a duration`) {
		t.Fatalf("a bad value: %v", err)
	}
}

// New's own ticker prints lines by itself.
func TestTickerPrints(t *testing.T) {
	var b testutil.SyncBuffer
	r := New(&b, cfg(false, 100*time.Millisecond))
	r.Add(3)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(b.String(), "progress: 0/3 points") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	r.Close()
	if !strings.Contains(b.String(), "progress: 0/3 points, 0 violation(s)") || !strings.HasSuffix(b.String(), "(done)\n") {
		t.Fatalf("the ticker printed %q", b.String())
	}
}
