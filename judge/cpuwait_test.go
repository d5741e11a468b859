package judge

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxdrill/runner/sysrun"
)

// The limit grows by what a service on a side that owes work waited for a
// CPU since settling began, read again each time the raised limit is
// reached, until the wait stops growing; a service's wait before
// settling, a restarted process's predecessor's, a side that owes nothing
// and a service that uses neither database nor broker give nothing.
func TestSettleLimitGrowsByTheCPUWaitedFor(t *testing.T) {
	t0 := time.Now()
	reads := []map[string]sysrun.CPUWait{
		{"consumer": {PID: 10, For: 3 * time.Second}, "relay": {PID: 20, For: time.Second}, "web": {PID: 30}},
		// The relay restarted (pid 21): all its wait is since settling began.
		{"consumer": {PID: 10, For: 5 * time.Second}, "relay": {PID: 21, For: 500 * time.Millisecond}, "web": {PID: 30, For: time.Hour}},
		{"consumer": {PID: 10, For: 5*time.Second + 50*time.Millisecond}, "relay": {PID: 21, For: 600 * time.Millisecond}},
	}
	i := 0
	c := newCPUWaits(func() (map[string]sysrun.CPUWait, bool) { i++; return reads[i-1], true }, 8*time.Second)
	live := []sysrun.Live{{Name: "consumer", Consumer: true}, {Name: "relay", Producer: true}, {Name: "web"}}
	start, limit := t0, 8*time.Second
	hard := start.Add(limit + maxRaise)
	both := owing{producer: true, consumer: true}
	if end, raised := c.raise(start.Add(limit), hard, limit, start, ""); !end.Equal(start.Add(limit)) || raised != "" {
		t.Fatalf("before any wait was read at the limit: end %v, raised %q", end.Sub(start), raised)
	}
	if !c.grew(live, both, start, t0.Add(10*time.Second)) {
		t.Fatal("the consumer waited 2s for a CPU since settling began: the limit must grow")
	}
	end, raised := c.raise(start.Add(limit), hard, limit, start, "raised from 8s to 8s: service consumer started again 0s into settling, and gets the whole 8s")
	if end.Sub(start) != 10*time.Second {
		t.Errorf("raised to %v, want 10s (8s + the consumer's 2s; the restarted relay's 0.5s and the web's do not count)", end.Sub(start))
	}
	for _, want := range []string{"raised from 8s to 10s: service consumer's threads waited 2s in all for a CPU", "; service consumer started again"} {
		if !strings.Contains(raised, want) {
			t.Errorf("raised %q: want %q", raised, want)
		}
	}
	if c.grew(live, both, start, t0.Add(10*time.Second)) {
		t.Errorf("the consumer waited 50ms more, under %v: the limit must not grow again (extra %v)", cpuGrowth, c.extra)
	}
	if end, _ := c.raise(start.Add(limit), start.Add(limit+time.Second), limit, start, ""); end.Sub(start) != limit+time.Second {
		t.Errorf("a raise past the cap: %v, want the cap %v", end.Sub(start), limit+time.Second)
	}
}

// Only the side that owes work is given its wait: an idle consumer next
// to a busy relay is judged at the limit.
func TestSettleLimitFollowsTheSideThatOwes(t *testing.T) {
	t0 := time.Now()
	read := func() (map[string]sysrun.CPUWait, bool) {
		return map[string]sysrun.CPUWait{"consumer": {PID: 10, For: 50 * time.Millisecond}, "relay": {PID: 20, For: 4 * time.Second}}, true
	}
	live := []sysrun.Live{{Name: "consumer", Consumer: true}, {Name: "relay", Producer: true}}
	c := newCPUWaits(read, 8*time.Second)
	c.base = nil
	if c.grew(live, owing{consumer: true}, t0, t0.Add(8*time.Second)) {
		t.Errorf("the consumer owes, the relay waited: raised by %v, want nothing", c.extra)
	}
	if !c.grew(live, owing{producer: true}, t0, t0.Add(8*time.Second)) || c.who != "relay" || c.extra != 4*time.Second {
		t.Errorf("the outbox owes, the relay waited 4s: raised by %v for %q", c.extra, c.who)
	}
}

// Threads that waited at once sum past the time there was: a wait is at
// most the time since settling began; and a service looping on a failure
// on a busy machine waits for ever: the raise stops at the limit once
// more.
func TestSettleLimitRaiseIsBounded(t *testing.T) {
	t0 := time.Now()
	c := newCPUWaits(func() (map[string]sysrun.CPUWait, bool) {
		return map[string]sysrun.CPUWait{"consumer": {PID: 10, For: time.Minute}}, true
	}, 8*time.Second)
	c.base = nil
	live := []sysrun.Live{{Name: "consumer", Consumer: true}}
	o := owing{consumer: true}
	if !c.grew(live, o, t0, t0.Add(5*time.Second)) || c.extra != 5*time.Second {
		t.Errorf("a minute of threads' waits 5s into settling: raised by %v, want 5s", c.extra)
	}
	if !c.grew(live, o, t0, t0.Add(20*time.Second)) || c.extra != 8*time.Second || c.grew(live, o, t0, t0.Add(30*time.Second)) {
		t.Errorf("waits past the limit: raised by %v, want the limit, 8s, and no more", c.extra)
	}
}

// Where the kernel keeps no count, nobody is given more time, and the
// count is not read again.
func TestSettleLimitWithoutACPUCount(t *testing.T) {
	reads := 0
	c := newCPUWaits(func() (map[string]sysrun.CPUWait, bool) { reads++; return nil, false }, time.Second)
	if c.grew([]sysrun.Live{{Name: "consumer", Consumer: true}}, owing{consumer: true}, time.Now(), time.Now()) || reads != 1 {
		t.Fatalf("grew without a count, or read it again (%d reads)", reads)
	}
}
