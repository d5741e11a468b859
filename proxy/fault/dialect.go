package fault

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/outboxdrill/runner/diag"
)

// Vocabulary is how one broker's protocol proxy reads the broker link's
// triggers (each broker's ProxyKind is one): the operations a trigger may
// name on it, in its spelling, and what it arms for a trigger.
type Vocabulary interface {
	// Operations are what a trigger may name on this broker, exactly as
	// written: the neutral publish, deliver, ack, then the broker's own
	// (Redis's commands are Operation's to know, in any case). Parse
	// suggests them for a fault written for another broker.
	Operations() []string
	// Operation is op as this broker's proxy spells it (Redis upper-cases
	// a command), or why it is none of its operations, in its words with
	// the closest of them.
	Operation(op string) (string, error)
	// Compile is t (its operation as Operation spells it, its Link the
	// broker's) as the proxy arms it, its own trigger, checked; or why the
	// proxy does not take it (a filter it cannot apply, an action it does
	// not apply there).
	Compile(t Trigger) (any, error)
}

// Dialect is a broker's Vocabulary under the broker's name (redis, kafka).
type Dialect struct {
	Broker string
	Vocabulary
}

// Compiled is a Trigger as one broker's proxy takes it, compiled once:
// what the proxy arms (Native, its own trigger), or why it does not take
// it (Skip, in that broker's words: a run on it skips the scenario). On a
// database link every Trigger is taken as it is: Native is the Trigger.
type Compiled struct {
	Trigger
	Broker string
	Native any
	Skip   error
}

// Compile compiles t for d's proxy: its operation in d's spelling, then
// d's own trigger. An operation d does not know is said in d's words,
// with the dialects of all that know it ("; Produce is an operation of
// kafka": a fault written for another broker).
func Compile(t Trigger, d Dialect, all []Dialect) Compiled {
	c := Compiled{Trigger: t, Broker: d.Broker}
	if t.Link != Broker {
		c.Native = t
		return c
	}
	op, err := d.Operation(t.Filter.Command)
	if err != nil {
		c.Skip = fmt.Errorf("%w%s", err, othersOp(t.Filter.Command, d.Broker, all))
		return c
	}
	t.Filter.Command = op
	c.Native, c.Skip = d.Compile(t)
	return c
}

// othersOp says which other brokers op is an operation of ("; Produce is
// an operation of kafka"), "" when none.
func othersOp(op, b string, all []Dialect) string {
	var of []string
	for _, d := range all {
		if _, err := d.Operation(op); d.Broker != b && err == nil {
			of = append(of, d.Broker)
		}
	}
	if len(of) == 0 {
		return ""
	}
	return fmt.Sprintf("; %s is an operation of %s", op, strings.Join(of, ", "))
}

// checkOperation judges a broker trigger's operation against ds: one a
// dialect names exactly as written is taken as it is; else the first
// dialect that knows it spells it. One none knows is an *UnsuitedError in
// the first dialect's words, with the closest operation of the others.
func checkOperation(t Trigger, ds []Dialect) (Trigger, error) {
	op := t.Filter.Command
	for _, d := range ds {
		if slices.Contains(d.Operations(), op) {
			return t, nil
		}
	}
	for _, d := range ds {
		if spelt, err := d.Operation(op); err == nil {
			t.Filter.Command = spelt
			return t, nil
		}
	}
	if len(ds) == 0 {
		return t, nil
	}
	_, err := ds[0].Operation(op)
	var others []string
	for _, d := range ds[1:] {
		others = append(others, d.Operations()...)
	}
	if hint := diag.Suggest(op, others); hint != "" {
		err = fmt.Errorf("%w; nor another broker's operation%s", err, hint)
	}
	return t, &UnsuitedError{t, fmt.Errorf("%s.%s(%s): %w", t.Link, t.Boundary, op, err)}
}

// Fault is a scenario's fault once loaded: its Trigger as parsed, and
// compiled once by each broker's proxy dialect it was loaded with (For).
type Fault struct {
	Trigger
	compiled []Compiled
	unsuited *UnsuitedError
}

// For is f compiled for broker b's proxy; false when f was not loaded with
// b's dialect (b has no proxy: a run on it says so when it arms f).
func (f *Fault) For(b string) (Compiled, bool) {
	for _, c := range f.compiled {
		if c.Broker == b {
			return c, true
		}
	}
	if f.Link != Broker {
		return Compiled{Trigger: f.Trigger, Broker: b, Native: f.Trigger}, true
	}
	return Compiled{}, false
}

// Unsuited is why no dialect f was loaded with takes it as written, nil
// when one does (or when it was loaded with none).
func (f *Fault) Unsuited() *UnsuitedError { return f.unsuited }

// Load parses a fault (Parse) and compiles it for each of ds. Its problems
// are Parse's; a broker trigger none of ds takes is a Problem whose Err is
// the *UnsuitedError (also f.Unsuited), each dialect's reason in it.
func Load(s Spec, ds []Dialect) (*Fault, []Problem) {
	t, probs := Parse(s, ds)
	f := &Fault{Trigger: t}
	for _, p := range probs {
		var un *UnsuitedError
		if !errors.As(p.Err, &un) {
			return f, probs // not compiled: the fault does not load
		}
		f.unsuited = un
	}
	// An operation none of ds knows is compiled too: each broker's reason
	// in its own words is what a system file's brokers: narrow it to.
	f.compile(ds)
	if len(probs) == 0 && f.unsuited != nil {
		probs = append(probs, Problem{"on", f.unsuited})
	}
	return f, probs
}

// Watch loads on: alone, as a service's ready: {on: …} writes it: read
// by Parse (Spec.Watch), every problem said as Load says a fault's,
// compiled for each of ds as a trigger that counts its crossings and
// never strikes.
func Watch(on string, ds []Dialect) (*Fault, []Problem) {
	return Load(Spec{On: on, Watch: true}, ds)
}

// New is a Trigger built in code (runner explore's, from what a proxy
// saw) loaded as Load loads a parsed one: its parts checked as Parse
// checks them, compiled for each of ds. The error is the first problem.
func New(t Trigger, ds []Dialect) (*Fault, error) {
	if t.Link.Database() && t.Filter.Table != "" {
		if err := checkTable(t.Link.String()+"."+t.Boundary.String(), t.Filter.Table); err != nil {
			return nil, err
		}
	}
	if t.Link == Broker {
		var err error
		if t, err = checkOperation(t, ds); err != nil {
			return nil, err
		}
	}
	f := &Fault{Trigger: t}
	f.compile(ds)
	if f.unsuited != nil {
		return nil, f.unsuited
	}
	return f, nil
}

// compile compiles f for each of ds; a broker trigger none takes is
// unsuited, each one's reason said.
func (f *Fault) compile(ds []Dialect) {
	if f.Link != Broker {
		return
	}
	var why []string
	for _, d := range ds {
		c := Compile(f.Trigger, d, ds)
		f.compiled = append(f.compiled, c)
		if c.Skip != nil {
			why = append(why, fmt.Sprintf("%s: %v", d.Broker, c.Skip))
		}
	}
	if len(ds) > 0 && len(why) == len(ds) && f.unsuited == nil {
		f.unsuited = &UnsuitedError{f.Trigger, fmt.Errorf("%s suits no broker's proxy (%s)", f.On(), strings.Join(why, "; "))}
	}
}

// ListedOperation is a Vocabulary's Operation for a proxy whose operations
// are a fixed list spelt as written (NATS, RabbitMQ, Kafka): op when ops
// holds it, else unknown(op) with the closest of ops.
func ListedOperation(op string, ops []string, unknown func(string) error) (string, error) {
	if !slices.Contains(ops, op) {
		return "", fmt.Errorf("%w%s", unknown(op), diag.Suggest(op, ops))
	}
	return op, nil
}

// Native is a proxy's compiled trigger as a Vocabulary's Compile returns
// it: nil (not a typed nil in an interface) when err says why not.
func Native[C any](c C, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return c, nil
}
