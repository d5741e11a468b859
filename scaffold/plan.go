package scaffold

import (
	"fmt"
	"path/filepath"
	"slices"
)

// keyOrder is the order of the keys in the file.
var keyOrder = []string{"schema", "produce", "outbox", "stream", "inbox", "projection", "event", "brokers"}

// basePlan holds what init knows before the probe: the services (their
// paths made relative to the out dir, where they run), the schemas.
func (in *Init) basePlan() *Plan {
	p := &Plan{Broker: in.p.Broker}
	for _, s := range []struct {
		name string
		cmd  Command
	}{{"relay", in.p.Relay}, {"consumer", in.p.Consumer}} {
		cmd, moved := s.cmd.Relocated(in.cwd, in.out)
		sp := &ServicePlan{Name: s.name, Cmd: cmd, Comments: slices.Clone(cmd.Comments)}
		if prog := cmd.Program(); prog != "" {
			sp.Comments = append(sp.Comments, prog+" (on the PATH init ran with: a service inherits the runner's environment)")
		}
		for _, m := range moved {
			sp.Comments = append(sp.Comments, "run: "+m)
		}
		p.Services = append(p.Services, sp)
	}
	var rel [2]string
	for i, s := range in.p.Schemas {
		rel[i] = in.rel(s)
	}
	p.set(&Key{Name: "schema", Value: flow("producer", rel[0], "consumer", rel[1])})
	return p
}

// rel is path (relative to where init ran) relative to the out dir.
func (in *Init) rel(path string) string {
	abs := path
	if !filepath.IsAbs(path) {
		abs = filepath.Join(in.cwd, path)
	}
	return relative(in.out, abs)
}

// provisional is the plan the probe runs with: the catalog's first
// candidates (the probe tells which are right).
func (in *Init) provisional(f *found) *Plan {
	p := in.basePlan()
	x := &inference{f: f, plan: p}
	p.set(x.produceKey())
	p.set(&Key{Name: "outbox", Value: flow("table", f.outbox.Table.Ref(), "event_id", f.eventID.Name, "payload", f.payload.Name, "unpublished", f.marker.Unpublished)})
	// The entry fields are what the probe finds out; these names only
	// let the file load.
	p.set(&Key{Name: "stream", Value: flow("event_id", f.eventID.Name, "payload", f.payload.Name)})
	in0 := f.inboxes[0]
	p.set(&Key{Name: "inbox", Value: flow("table", in0.Table.Ref(), "consumer", in0.Consumer.Name, "event_id", in0.EventID.Name, "payload", in0.Payload.Name)})
	if len(f.models) > 0 {
		if m := f.models[0]; m.complete() == 4 {
			p.set(&Key{Name: "projection", Value: yq(fmt.Sprintf("SELECT %s, %s, %s, %s FROM %s", Ident(m.Consumer.Name), Ident(m.Currency.Name), Ident(m.Amount.Name), Ident(m.Count.Name), m.Table.Ref()))})
		}
	}
	in.brokersKey(p, "")
	return p
}

// brokersKey writes brokers: the one broker the services were run on.
func (in *Init) brokersKey(p *Plan, seen string) {
	k := &Key{Name: "brokers", Value: "[" + in.p.Broker + "]"}
	if seen != "" {
		k.Comments = append(k.Comments, seen)
	}
	k.Comments = append(k.Comments, fmt.Sprintf("init ran the services on %s (--broker): list every broker they speak", in.p.Broker))
	p.set(k)
}

// order sorts the plan's keys into the file's order.
func (p *Plan) order() {
	slices.SortStableFunc(p.Keys, func(a, b *Key) int { return slices.Index(keyOrder, a.Name) - slices.Index(keyOrder, b.Name) })
}

// header is the file's opening comment, with the notes.
func (in *Init) header(p *Plan, notes []string) {
	p.Header = []string{
		"Written by `runner init` from what your relay and consumer did with one probe event",
		fmt.Sprintf("(%s, %d %s) behind the runner's proxies on %s, fault-free. Each key says what", probeName, probeAmount, probeCurrency, in.p.Broker),
		"it was seen doing (seen:), or what init made up (check:); \"or:\" lines are the other",
		"readings the evidence allowed. Check them, then drill: runner run scenarios/",
	}
	for _, n := range notes {
		p.Header = append(p.Header, "note: "+n)
	}
}
