// Package pace chooses how many scenarios run at once from what bounds
// them: the CPU a running one uses (a point mostly waits: service starts,
// claim timers, settling) and the memory left, not the core count alone.
package pace

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// Sample is one look at the machine and at the run's own processes.
type Sample struct {
	At time.Time
	// CPU is the CPU time the run's process tree (the runner, the servers
	// it started, the services) has used so far; Machine the whole
	// machine's busy time so far (every CPU's).
	CPU, Machine time.Duration
	// RSS is the tree's resident memory, Available the machine's
	// (MemAvailable), Total its memory.
	RSS, Available, Total int64
}

// Rule is what a decision weighs.
type Rule struct {
	Cores int // the machine's CPUs
	// Target is the share of the cores the running points may keep busy
	// (0.9: headroom for the bursts of a start or a judge; a service
	// that waited for a CPU anyway is given that time by settling).
	Target float64
	// Least and Most bound the limit: Most is the connection budget's
	// ceiling (runner.Params.Parallel), Least never below 1.
	Least, Most int
	// Reserve is memory left to everything else: a decision never plans
	// past Available − Reserve.
	Reserve int64
}

// Window is what happened between two samples: the mean number of
// points running, and the samples at its ends.
type Window struct {
	From, To Sample
	Running  float64 // mean points running over the window
}

// Decide is the rule, a pure function of the window and the current
// limit: the points use perPoint = ΔCPU / (Δwall × running) cores each;
// the cores they may use are Cores × Target less what other work on the
// machine keeps busy, but never less than half of Cores × Target (a busy
// neighbour does not stop the run); so want = usable / perPoint points.
// Memory caps it at what fits in Available − Reserve at the tree's RSS
// per running point. The limit grows by at most half (at least one) per
// decision, since a new point's first second (a service's start) costs
// more than its average; it shrinks at once. Why says which bound
// decided.
func Decide(r Rule, w Window, limit int) (next int, why string) {
	wall := w.To.At.Sub(w.From.At).Seconds()
	if wall <= 0 || w.Running < 0.5 {
		return clamp(r, limit), "no point ran in the window: held"
	}
	own := (w.To.CPU - w.From.CPU).Seconds() / wall // cores the tree kept busy
	machine := (w.To.Machine - w.From.Machine).Seconds() / wall
	usable := float64(r.Cores) * r.Target
	others := max(0, machine-own)
	usable = max(usable-others, usable/2)
	perPoint := max(own/w.Running, 0.01) // a point that used no CPU at all still costs something
	want, bound := usable/perPoint, fmt.Sprintf("CPU: %.2f cores a point, %.2f usable", perPoint, usable)
	if w.To.Total > 0 && w.To.RSS > 0 {
		perRSS := float64(w.To.RSS) / max(w.Running, 1)
		room := float64(w.To.Available-r.Reserve) / perRSS
		if fit := w.Running + room; fit < want {
			want, bound = fit, fmt.Sprintf("memory: %d MB a point, %d MB available", int64(perRSS)>>20, w.To.Available>>20)
		}
	}
	n := int(math.Floor(want))
	switch {
	case n > limit:
		n = min(n, max(limit+1, limit*3/2))
	case n < limit:
		n = max(n, 1)
	}
	return clamp(r, n), bound
}

// DefaultRule is the rule explore runs by: 90 % of the cores, at most
// ceiling points, a tenth of the memory (at least 512 MB) left alone.
func DefaultRule(cores, ceiling int, total int64) Rule {
	return Rule{Cores: cores, Target: 0.9, Least: 1, Most: ceiling, Reserve: max(total/10, 512<<20)}
}

func clamp(r Rule, n int) int { return max(r.Least, 1, min(n, r.Most)) }

// Controller is a resizable limit on the points running at once, resized
// by Decide every Every from Read's samples.
type Controller struct {
	rule  Rule
	read  func() (Sample, error)
	every time.Duration

	mu      sync.Mutex
	cond    *sync.Cond
	limit   int
	running int
	// busyArea integrates running over time since the last decision.
	busyArea float64
	mark     time.Time
	last     Sample
	// stats over the whole run: the mean running, the limits taken.
	sumArea         float64
	began           time.Time
	least, most     int
	decisions, errs int
	lastWhy         string
}

// New starts a controller at start points (clamped to the rule), sampling
// with read every every; it decides only after a window in which the limit
// was full most of the time. A read that fails (no
// /proc) leaves the limit where it is: the run goes on at start.
func New(r Rule, start int, read func() (Sample, error), every time.Duration) *Controller {
	c := &Controller{rule: r, read: read, every: every, limit: clamp(r, start), began: time.Now()}
	c.cond = sync.NewCond(&c.mu)
	c.least, c.most, c.mark = c.limit, c.limit, c.began
	if s, err := read(); err == nil {
		c.last = s
	} else {
		c.errs++
	}
	return c
}

// Run decides every c.every until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			c.mu.Lock()
			c.cond.Broadcast()
			c.mu.Unlock()
			return
		case <-t.C:
			c.step()
		}
	}
}

// step takes a sample and applies Decide to the window since the last.
func (c *Controller) step() {
	s, err := c.read()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.account(time.Now())
	if err != nil || c.last.At.IsZero() {
		c.errs++
		c.last, c.busyArea = s, 0
		return
	}
	w := Window{From: c.last, To: s, Running: c.busyArea / s.At.Sub(c.last.At).Seconds()}
	if w.Running < float64(c.limit)-0.5 {
		// The places were not full: a batch of one (the fault-free run),
		// a batch's tail, or the switch from one to the next, when the
		// window mixes what came before. It says nothing of how many
		// points may run at once.
		c.last, c.busyArea = s, 0
		return
	}
	next, why := Decide(c.rule, w, c.limit)
	c.limit, c.lastWhy, c.decisions = next, why, c.decisions+1
	c.least, c.most = min(c.least, next), max(c.most, next)
	c.last, c.busyArea = s, 0
	c.cond.Broadcast()
}

// account adds the running count's area up to now.
func (c *Controller) account(now time.Time) {
	d := now.Sub(c.mark).Seconds()
	c.busyArea += float64(c.running) * d
	c.sumArea += float64(c.running) * d
	c.mark = now
}

// Acquire waits for a place under the limit; false when ctx ended first.
func (c *Controller) Acquire(ctx context.Context) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.running >= c.limit {
		if ctx.Err() != nil {
			return false
		}
		c.cond.Wait()
	}
	if ctx.Err() != nil {
		return false
	}
	c.account(time.Now())
	c.running++
	return true
}

// Release gives a place back.
func (c *Controller) Release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.account(time.Now())
	c.running--
	c.cond.Broadcast()
}

// Wake makes waiting Acquires look at ctx again (its end).
func (c *Controller) Wake() {
	c.mu.Lock()
	c.cond.Broadcast()
	c.mu.Unlock()
}

// Limit is the current limit.
func (c *Controller) Limit() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.limit
}

// Area is the point-seconds run so far: the mean running between two
// calls is their difference over the time between them.
func (c *Controller) Area() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.account(time.Now())
	return c.sumArea
}

// Summary says what the controller did: the mean running, the range of
// limits, and the last decision's bound.
func (c *Controller) Summary() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.account(time.Now())
	st := Stats{Least: c.least, Most: c.most, Ceiling: c.rule.Most, Decisions: c.decisions, Why: c.lastWhy}
	if d := time.Since(c.began).Seconds(); d > 0 {
		st.Mean = c.sumArea / d
	}
	if c.errs > 0 && c.decisions == 0 {
		st.Why = "the machine could not be read (no /proc): held at the start"
	}
	return st
}

// Stats is a controller's run in numbers.
type Stats struct {
	Mean                 float64 // points running, on average over the controller's life
	Least, Most, Ceiling int
	Decisions            int
	Why                  string // the last decision's bound
}

func (s Stats) String() string {
	return fmt.Sprintf("adaptive, %d–%d at once (ceiling %d), %d decisions; the last bound by %s", s.Least, s.Most, s.Ceiling, s.Decisions, s.Why)
}
