package soak

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/outboxdrill/runner/internal/lazy"
)

// step is one step of a generated schedule as the scenario language
// writes it: the step's name and its parameters, in order.
type step struct {
	name   string
	params []param
	// fault names the fault the step injects, by the step and the
	// parameter that inject it ("consume(fail=divzero)"); "" for none.
	fault string
	// expect is the step's expect: map, in flow style ("" for none).
	expect string
}

// param is a step's parameter; value is written as it is (a YAML scalar).
type param struct{ key, value string }

// schedule is one generated scenario: part k of a soak's events with the
// faults drawn for them, then the drain.
type schedule struct {
	name   string
	file   string // where it is written when it breaks something
	events int
	steps  []step
}

// The faults the soak draws, each a parameter of a reference step (or,
// for a replay, the publish step itself), by the name the report gives.
const (
	produceFail = "produce(fail=divzero)"
	skipMark    = "relay(skip_mark)"
	replay      = "publish"
	consumeFail = "consume(fail=divzero)"
	consumeAck  = "consume(skip_ack)"
	claimFail   = "claim(fail=divzero)"
	claimAck    = "claim(skip_ack)"
	// Crashes (Params.Crash): a server killed and started again.
	producerCrash = "producer_db(restart)"
	brokerCrash   = "broker(restart)"
	consumerCrash = "consumer_db(restart)"
)

// generator writes a schedule, drawing each fault from a generator seeded
// with the soak's seed and the schedule's number: the same seed writes the
// same scenario.
type generator struct {
	rnd     *rand.Rand
	rate    float64
	crash   bool // draw crashes too
	with    map[string][]param
	steps   []step
	pending bool // a consume or claim fault left entries pending
}

// generate writes schedule k of p's p.Workers: its share of the events in
// batches of p.Batch — each event produced (after a rolled-back attempt,
// drawn), the batch relayed (after a relay that does not mark, drawn), its
// last event published once more (drawn), the new entries consumed (with
// divzero or skip_ack, drawn) and what a fault left pending reclaimed
// (with a fault drawn too) — then the drain: a relay, a consume and a
// claim without faults, which leave nothing unpublished or pending.
func generate(p Params, with map[string][]param, k int) schedule {
	lo, hi := k*p.Events/p.Workers, (k+1)*p.Events/p.Workers
	g := &generator{rnd: rand.New(rand.NewPCG(p.Seed, uint64(k))), rate: p.Faults, crash: p.Crash, with: with}
	for b := lo; b < hi; b += p.Batch {
		end := min(b+p.Batch, hi)
		for i := b; i < end; i++ {
			g.produce(i)
		}
		g.restart("producer_db", producerCrash)
		g.relay()
		g.replay(end - 1)
		g.restart("broker", brokerCrash)
		g.consume()
		g.restart("consumer_db", consumerCrash)
	}
	g.add("relay", "", nil)
	g.add("consume", "", nil)
	g.add("claim", "", nil)
	name := fmt.Sprintf("soak --in-process --seed %d", p.Seed)
	if p.Workers > 1 {
		name += fmt.Sprintf(" (schedule %d of %d)", k+1, p.Workers)
	}
	return schedule{name: name, file: scheduleFile(p, k), events: hi - lo, steps: g.steps}
}

// scheduleFile is where schedule k is written when it breaks something.
func scheduleFile(p Params, k int) string {
	name := fmt.Sprintf("soak-seed-%d", p.Seed)
	if p.Workers > 1 {
		name += fmt.Sprintf("-%dof%d", k+1, p.Workers)
	}
	return name + ".yaml"
}

func (g *generator) draw() bool { return g.rnd.Float64() < g.rate }

// add appends a step, the with parameters of its kind last (they replace
// a drawn one of the same key).
func (g *generator) add(name, fault string, params []param, expect ...string) {
	for _, w := range g.with[name] {
		params = setParam(params, w)
	}
	g.steps = append(g.steps, step{name: name, params: params, fault: fault, expect: strings.Join(expect, "")})
}

func setParam(ps []param, p param) []param {
	for i := range ps {
		if ps[i].key == p.key {
			ps[i] = p
			return ps
		}
	}
	return append(ps, p)
}

// produce commits event i; a drawn fault rolls a first attempt back (the
// step says so, or the drill is broken) and the business retries.
func (g *generator) produce(i int) {
	t := []param{{"event", eventID(i)}, {"amount", fmt.Sprint(1 + i%97)}, {"currency", []string{"USD", "EUR", "JPY"}[i%3]},
		{"from", fmt.Sprintf("acct-%d", i%7)}, {"to", fmt.Sprintf("acct-%d", (i+3)%7)}}
	if g.draw() {
		g.add("produce", produceFail, append(t[:len(t):len(t)], param{"fail", "divzero"}), "{failed: 1}")
	}
	g.add("produce", "", t)
}

func eventID(i int) string { return fmt.Sprintf("e-%d", i) }

// relay publishes the batch; a drawn fault publishes it without marking
// first, so the next relay publishes it again.
func (g *generator) relay() {
	if g.draw() {
		g.add("relay", skipMark, []param{{"skip_mark", "true"}})
	}
	g.add("relay", "", nil)
}

// restart kills a server and starts it again, when crashes are drawn:
// what was committed (or, on the broker, written: the runner's Redis
// fsyncs every write) must be there after.
func (g *generator) restart(server, fault string) {
	if g.crash && g.draw() {
		g.add(server, fault, []param{{"restart", "true"}})
	}
}

// replay publishes the batch's last event again, as the outbox holds it: a
// redelivery under a new entry id.
func (g *generator) replay(last int) {
	if g.draw() {
		g.add("publish", replay, []param{{"event", eventID(last)}})
	}
}

// consume reads the new entries, then a claim takes over what a fault left
// pending: both with a fault drawn (divzero, else skip_ack).
func (g *generator) consume() {
	g.handle("consume", consumeFail, consumeAck)
	if g.pending {
		g.handle("claim", claimFail, claimAck)
	}
}

func (g *generator) handle(name, fail, skipAck string) {
	switch {
	case g.draw():
		g.add(name, fail, []param{{"fail", "divzero"}})
		g.pending = true
	case g.draw():
		g.add(name, skipAck, []param{{"skip_ack", "true"}})
		g.pending = true
	default:
		g.add(name, "", nil)
		g.pending = false
	}
}

// render writes steps as a scenario file: comment lines first, then the
// scenario.
func render(name, comment string, steps []step) []byte {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(comment, "\n"), "\n") {
		if line != "" {
			fmt.Fprintf(&b, "# %s\n", line)
		}
	}
	fmt.Fprintf(&b, "name: %s\nsteps:\n", scalar(name))
	for _, s := range steps {
		if len(s.params) == 0 {
			fmt.Fprintf(&b, "  - %s\n", s.name)
		} else {
			kvs := make([]string, len(s.params))
			for i, p := range s.params {
				kvs[i] = p.key + ": " + p.value
			}
			fmt.Fprintf(&b, "  - %s: {%s}\n", s.name, strings.Join(kvs, ", "))
		}
		if s.expect != "" {
			fmt.Fprintf(&b, "    expect: %s\n", s.expect)
		}
	}
	return []byte(b.String())
}

var plain = lazy.Regexp(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// scalar is v as a YAML flow scalar: plain when it reads back as itself,
// else double-quoted (JSON's quoting is YAML's).
func scalar(v string) string {
	if plain().MatchString(v) {
		return v
	}
	q, _ := json.Marshal(v)
	return string(q)
}
