package sysrun

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/servers"
	"github.com/outboxdrill/runner/system"
)

// readyWatch is one service process's ready: {on: …}: a trigger that
// counts the boundary's crossings and never strikes, armed on the proxy of
// its link before the process starts, so that its first crossing is
// counted however early. The start step waits for it where it waits for
// the ready line (servers.StartService); the proxy, as it counts a
// fault's crossings, says when it came.
type readyWatch struct {
	on   fault.Trigger
	a    counter
	s    *service
	met  chan struct{}
	once sync.Once
}

// counter is what readyWatch needs of an armed trigger: a database's
// (pgwire.Armed) or a broker's (broker.Strike).
type counter interface {
	Counted() <-chan struct{}
	Done() <-chan struct{}
	Err() error
	Retire()
}

// watchReady arms spec's ready: {on: …} on s's proxies; nil when the
// service awaits no crossing. A broker boundary the run's broker's proxy
// does not take is an error here: the runner's gate skips such a scenario
// before it starts (system.ReadySkip), so only a Run driven without it
// meets it.
func (r *Run) watchReady(s *service, spec *system.Service) (*readyWatch, error) {
	f := spec.ReadyOn
	if f == nil {
		return nil, nil
	}
	var a counter
	var err error
	switch {
	case f.Link == fault.ProducerDB:
		a, err = s.pg[0].Arm(f.Trigger)
	case f.Link == fault.ConsumerDB:
		a, err = s.pg[1].Arm(f.Trigger)
	default:
		c, ok := f.For(r.cfg.BrokerName)
		if why := system.ReadySkip(spec, r.cfg.BrokerName); why != "" || !ok || s.broker == nil {
			return nil, fmt.Errorf("ready: %s", cmp.Or(why, f.On()+" needs a "+r.cfg.BrokerName+" protocol proxy; the runner has none for it"))
		}
		a, err = s.broker.Arm(c)
	}
	if err != nil {
		return nil, fmt.Errorf("ready: on %s: %w", f.On(), err)
	}
	w := &readyWatch{on: f.Trigger, a: a, s: s, met: make(chan struct{})}
	go w.wake()
	return w, nil
}

// wake closes met at the first crossing counted, or once the trigger
// cannot count any (an unclassifiable boundary, or retired).
func (w *readyWatch) wake() {
	select {
	case <-w.a.Counted():
	case <-w.a.Done():
	}
	close(w.met)
}

// retire stops the counting once the wait is over: a waiting database
// trigger has its proxy ask the server what each transaction wrote.
func (w *readyWatch) retire() {
	if w != nil {
		w.once.Do(w.a.Retire)
	}
}

// await is w as the start step waits for it, nil (no interface holding a
// nil pointer) when there is none.
func (w *readyWatch) await() servers.Await {
	if w == nil {
		return nil
	}
	return w
}

func (w *readyWatch) Met() <-chan struct{} { return w.met }

// Err is why the boundary can never be counted, nil once it was.
func (w *readyWatch) Err() error {
	select {
	case <-w.a.Counted():
		return nil
	default:
		return w.a.Err()
	}
}

func (w *readyWatch) What() string { return "crossing of " + w.on.On() }

// maxInstead bounds the kinds of crossings a timeout's error lists.
const maxInstead = 10

// Instead is what the service's proxies saw so far, by kind in the order
// each kind first came, with its count: "its proxies saw
// broker.XGROUP.CREATE→ok ×1, producer_db.commit(unattributed) ×3".
func (w *readyWatch) Instead() string {
	cs := w.s.crossings()
	if len(cs) == 0 {
		return "its proxies saw no crossing at all"
	}
	slices.SortStableFunc(cs, func(a, b fault.Crossing) int { return a.At.Compare(b.At) })
	var kinds []string
	count := map[string]int{}
	for _, c := range cs {
		l := c.Label()
		if count[l] == 0 {
			kinds = append(kinds, l)
		}
		count[l]++
	}
	var parts []string
	for _, k := range kinds[:min(len(kinds), maxInstead)] {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, count[k]))
	}
	if more := len(kinds) - maxInstead; more > 0 {
		parts = append(parts, fmt.Sprintf("and %d more kinds", more))
	}
	return "its proxies saw " + strings.Join(parts, ", ")
}
