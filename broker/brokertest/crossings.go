package brokertest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/proxy/fault"
)

// Drill runs a proxy adapter's fixed client traffic through a new proxy,
// with arm armed on it (nil: none), and returns the crossings its
// CrossingLog reported and the strike.
type Drill func(t *testing.T, arm *fault.Trigger) ([]fault.Crossing, broker.Strike)

// EveryCrossingStrikes arms, for every crossing of xs (a fault-free
// drill's) where a trigger can strike, a 1 ms delay at the nth the
// crossings predict for its operation and boundary, runs the drill again,
// and checks that it struck exactly there: the nth runner explore gives a
// point is the one the proxy counts. skip leaves out a crossing whose nth
// varies from run to run (idle polls).
func EveryCrossingStrikes(t *testing.T, xs []fault.Crossing, drill Drill, skip func(c fault.Crossing, nth int) bool) {
	t.Helper()
	for _, b := range []fault.Boundary{fault.Request, fault.Reply} {
		count := map[string]int{}
		for _, c := range xs {
			m := c.Meet(b)
			if m == fault.Passed {
				continue
			}
			count[c.Op]++
			if m != fault.Strikes || skip != nil && skip(c, count[c.Op]) {
				continue
			}
			tr := c.Trigger(b)
			tr.Nth, tr.Action = count[c.Op], fault.Action{Do: fault.Delay, Delay: time.Millisecond}
			t.Run(fmt.Sprintf("%s(%s)#%d", b, c.Op, tr.Nth), func(t *testing.T) {
				ys, s := drill(t, &tr)
				if !s.Fired() || s.Err() != nil {
					t.Fatalf("fired %v, err %v", s.Fired(), s.Err())
				}
				n := 0
				for _, y := range ys {
					if y.Op != c.Op || y.Meet(b) == fault.Passed {
						continue
					}
					if n++; (y.Fault != "") != (n == tr.Nth) || y.Fault != "" && !strings.HasPrefix(y.Fault, b.String()+"("+c.Op) {
						t.Errorf("%s #%d: fault %q, want the strike at #%d", y.Op, n, y.Fault, tr.Nth)
					}
				}
			})
		}
	}
}

// Through starts kind's proxy in front of the server at url, arms arm on
// it (nil: nothing) as the runner does, compiled by kind, runs traffic, the client's side, through it (given
// the proxy), and returns what the proxy's CrossingLog then reports, with
// the strike. A short pause lets the last replies cross first.
func Through(t *testing.T, kind broker.ProxyKind, url string, arm *fault.Trigger, traffic func(p broker.Proxy)) ([]fault.Crossing, broker.Strike) {
	t.Helper()
	p, err := kind.Listen(url)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var strike broker.Strike
	if arm != nil {
		c := fault.Compile(*arm, fault.Dialect{Vocabulary: kind}, nil)
		if c.Skip != nil {
			t.Fatal(c.Skip)
		}
		if strike, err = p.Arm(c); err != nil {
			t.Fatal(err)
		}
	}
	traffic(p)
	time.Sleep(100 * time.Millisecond)
	return p.(broker.CrossingLog).Crossings(), strike
}
