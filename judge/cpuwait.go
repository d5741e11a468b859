package judge

import (
	"fmt"
	"strings"
	"time"

	"github.com/outboxdrill/runner/sysrun"
)

// cpuGrowth is how much more a service must have waited for a CPU since
// the limit was last raised for it to be raised again: what is left is
// judged, not chased a poll at a time.
const cpuGrowth = 100 * time.Millisecond

// cpuWaits gives the services the time they waited for a CPU while
// settling: the limit is time a running system had to finish its work,
// and a process that was runnable but not running (a machine asked for
// more than its cores: a CI runner starting a dozen Node processes at
// once) did not have it. Measured per service from the kernel's run-queue
// delay (servers.CPUWait), from when settling began or the process
// started; read at settling's start and again only when the limit is
// reached, so it costs nothing while a system settles in time. A service
// that is stuck waits on a lock or a socket, not for a CPU: it gets
// nothing more, and is judged at the limit as before.
type cpuWaits struct {
	read  func() (map[string]sysrun.CPUWait, bool)
	most  time.Duration             // the raise's bound: the limit once more
	base  map[string]sysrun.CPUWait // at settling's start
	ok    bool                      // the kernel keeps the count
	extra time.Duration             // the limit's raise so far
	who   string                    // the service that waited longest
}

// newCPUWaits reads the waits at settling's start. The raise is at most
// limit: a service that loops on a failure uses every CPU it is given and
// waits for more on a busy machine, and it must still be judged in
// bounded time.
func newCPUWaits(read func() (map[string]sysrun.CPUWait, bool), limit time.Duration) cpuWaits {
	base, ok := read()
	return cpuWaits{read: read, base: base, ok: ok, most: limit}
}

// owing says which side's services a raise is for: the producer's while
// the outbox holds unpublished events, the consumer's while anything
// else is owed or soft; either while the state still moves.
type owing struct{ producer, consumer bool }

// grew reads the waits again at the limit (now) and reports whether a
// live service on a side that owes work waited cpuGrowth more than the
// limit was raised for so far; raise then adds it. A service's wait is
// its threads' summed (they may wait at once: it may overstate, never
// understate), at most the time since settling began.
func (c *cpuWaits) grew(live []sysrun.Live, o owing, start, now time.Time) bool {
	if !c.ok {
		return false
	}
	waits, ok := c.read()
	if !ok {
		c.ok = false
		return false
	}
	most, who := time.Duration(0), ""
	for _, l := range live {
		w, ok := waits[l.Name]
		if !ok || !(l.Consumer && o.consumer || l.Producer && o.producer) {
			continue
		}
		d := w.For
		if b, ok := c.base[l.Name]; ok && b.PID == w.PID {
			d -= b.For // waited before settling began
		}
		d = min(d, now.Sub(start))
		if d > most {
			most, who = d, l.Name
		}
	}
	most = min(most, c.most)
	if most < c.extra+cpuGrowth {
		return false
	}
	c.extra, c.who = most, who
	return true
}

// raise moves end by the waits read so far (never past hard) and says so
// in raised.
func (c *cpuWaits) raise(end, hard time.Time, limit time.Duration, start time.Time, raised string) (time.Time, string) {
	if c.extra == 0 {
		return end, raised
	}
	end = end.Add(c.extra)
	if end.After(hard) {
		end = hard
	}
	why := fmt.Sprintf("service %s's threads waited %s in all for a CPU (runnable, not running: the machine ran more than its cores could)", c.who, c.extra.Round(time.Millisecond))
	to := end.Sub(start).Round(time.Millisecond)
	if _, rest, ok := strings.Cut(raised, ": "); ok {
		return end, fmt.Sprintf("raised from %s to %s: %s; %s", limit, to, why, rest)
	}
	return end, fmt.Sprintf("raised from %s to %s: %s", limit, to, why)
}
