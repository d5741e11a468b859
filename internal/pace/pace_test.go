package pace

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

const gb = int64(1) << 30

// window is Δwall seconds in which the tree used own cores and the
// machine busy cores, running points on average, with rss of the tree.
func window(wall, own, busy, running float64, rss, avail int64) Window {
	t0 := time.Unix(1000, 0)
	sec := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	return Window{
		From:    Sample{At: t0, CPU: sec(10), Machine: sec(100)},
		To:      Sample{At: t0.Add(sec(wall)), CPU: sec(10 + own*wall), Machine: sec(100 + busy*wall), RSS: rss, Available: avail, Total: 24 * gb},
		Running: running,
	}
}

func TestDecide(t *testing.T) {
	r := Rule{Cores: 2, Target: 0.8, Least: 1, Most: 16, Reserve: gb}
	cases := []struct {
		name  string
		w     Window
		limit int
		want  int
		bound string
	}{
		// 2 points using 0.2 cores each: 1.6 usable cores hold 8; the
		// limit grows by half per decision: 2 → 3.
		{"waiting points grow", window(1, 0.4, 0.4, 2, 200<<20, 20*gb), 2, 3, "CPU"},
		{"growth by half", window(1, 0.8, 0.8, 4, 400<<20, 20*gb), 4, 6, "CPU"},
		{"at the want", window(1, 1.6, 1.6, 8, 800<<20, 20*gb), 8, 8, "CPU"},
		// 8 points using 0.4 cores each: 1.6 / 0.4 = 4: shrinks at once.
		{"busy points shrink at once", window(1, 3.2, 3.2, 8, 800<<20, 20*gb), 8, 4, "CPU"},
		// Other work keeps 1.5 cores busy: usable 1.6 − 1.5 is below half
		// of 1.6, so 0.8: 0.8 / 0.2 = 4.
		{"a busy neighbour counts down to half", window(1, 0.4, 1.9, 2, 200<<20, 20*gb), 4, 4, "CPU"},
		// 100 MB a point, 1.2 GB available, 1 GB reserved: 2 more fit.
		{"memory caps", window(1, 0.1, 0.1, 4, 400<<20, gb+200<<20), 4, 6, "memory"},
		{"memory shrinks", window(1, 0.1, 0.1, 4, 4*gb, gb+gb/2), 4, 4, "memory"},
		{"ceiling", window(1, 0.01, 0.01, 16, 100<<20, 20*gb), 16, 16, "CPU"},
		{"idle window holds", window(1, 0, 0, 0, 0, 20*gb), 5, 5, "held"},
		{"never below one", window(1, 8, 8, 1, 0, 20*gb), 3, 1, "CPU"},
	}
	for _, c := range cases {
		got, why := Decide(r, c.w, c.limit)
		if got != c.want || !strings.Contains(why, c.bound) {
			t.Errorf("%s: Decide(limit %d) = %d (%s), want %d bound by %s", c.name, c.limit, got, why, c.want, c.bound)
		}
	}
}

// The controller follows its samples: points that wait let it grow to
// the ceiling; then points that compute bring it down, and Acquire holds
// a worker back while the limit is reached.
func TestControllerFollowsSamples(t *testing.T) {
	own := 0.1 // cores a running point uses, as the fake tree reports
	var cpu time.Duration
	last := time.Now()
	c := (*Controller)(nil)
	read := func() (Sample, error) {
		now := time.Now()
		if c != nil {
			cpu += time.Duration(own * float64(c.running) * float64(now.Sub(last)))
		}
		last = now
		return Sample{At: now, CPU: cpu, Machine: cpu, Total: 24 * gb, Available: 20 * gb, RSS: 10 << 20}, nil
	}
	c = New(Rule{Cores: 2, Target: 0.8, Least: 1, Most: 6}, 2, read, time.Hour)
	ctx := context.Background()
	hold := func(n int) {
		for range n {
			if !c.Acquire(ctx) {
				t.Fatal("Acquire refused under the limit")
			}
		}
	}
	hold(1)
	time.Sleep(5 * time.Millisecond)
	c.step() // one place of two taken: held
	if got := c.Limit(); got != 2 || c.Summary().Decisions != 0 {
		t.Fatalf("a window in which the places were not full moved it to %d (%s)", got, c.Summary())
	}
	hold(1)
	for range 5 { // every place taken, a while, then a decision
		c.mu.Lock()
		n := c.limit - c.running
		c.mu.Unlock()
		hold(n)
		time.Sleep(5 * time.Millisecond)
		c.step()
	}
	if got := c.Limit(); got != 6 {
		t.Fatalf("waiting points: limit %d, want the ceiling 6 (%s)", got, c.Summary())
	}
	own = 1 // now each point keeps a core busy: 1.6 / 1 → 1
	time.Sleep(5 * time.Millisecond)
	c.step()
	if got := c.Limit(); got != 1 {
		t.Fatalf("computing points: limit %d, want 1 (%s)", got, c.Summary())
	}
	for range 6 {
		c.Release()
	}
	hold(1)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	go func() { <-cctx.Done(); c.Wake() }()
	if c.Acquire(cctx) {
		t.Fatal("Acquire past the limit of 1")
	}
	if st := c.Summary(); st.Least != 1 || st.Most != 6 || st.Decisions != 6 {
		t.Fatalf("summary %+v", st)
	}
}

func TestReadProc(t *testing.T) {
	if _, err := os.Stat("/proc/stat"); err != nil {
		t.Skip("no /proc on this system: the controller holds its start there")
	}
	s0, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	u0 := ownCPU(t)
	for ownCPU(t)-u0 < 200*time.Millisecond { // burn CPU the sample must see
	}
	s1, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if d := s1.CPU - s0.CPU; d < 150*time.Millisecond {
		t.Fatalf("200 ms of CPU (getrusage) counted as %s of the tree's", d)
	}
	if s1.Machine-s0.Machine < s1.CPU-s0.CPU-20*time.Millisecond || s1.RSS <= 0 || s1.Available <= 0 {
		t.Fatalf("implausible sample %+v after %+v", s1, s0)
	}
}

// ownCPU is the process's CPU time as getrusage says.
func ownCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
