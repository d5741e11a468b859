package explore

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/proxy/fault"
)

// Fault is one fault of a schedule, armed with a start step of the
// workload (Where "": its fault:, "also": a second one on the same
// process, "then": on the process its supervisor restarts first), or by a
// fault: step put before workload step Step (Where "step", random mode).
type Fault struct {
	Step    int
	Service string        // the service a "step" fault arms; the start step's otherwise
	On      fault.Trigger // where: consumer_db.commit(table=inbox), broker.reply(XADD) (its Nth and Action are the fault's own)
	Nth     int
	Do      string // kill, cut, error, delay(500ms)
	Where   string
}

func (f Fault) String() string {
	s := fmt.Sprintf("%s nth=%d do=%s", f.On.On(), f.Nth, f.Do)
	switch f.Where {
	case "then":
		s += " (on its restart)"
	case "also":
		s += " (also)"
	}
	return s
}

// Variant is the workload with a fault schedule, some events left out.
type Variant struct {
	Faults []Fault
	Drop   map[int]bool // workload steps (events) left out
	// Unchecked are the workload's check keys left out: with events left
	// out they failed where the whole workload's did not (inbox.rows: 2
	// with one event), so they would fail once the bug is fixed, too.
	Unchecked []string
	// Optional writes each fault optional: a finding's scenario (and a
	// random schedule) must pass on a service that no longer crosses the
	// boundary, once its bug is fixed; exploring's own points need their
	// fault to strike (never reached otherwise).
	Optional bool
	// Pin is what a written file carries so that `runner run FILE` alone
	// runs it as explore did (zero for exploring's own runs, which the
	// session's flags already shape).
	Pin Pin
}

// Pin is a written file's own run settings.
type Pin struct {
	Broker string // broker: the broker it was found on
	Settle string // settle: explore's --settle, when the workload has none
	// NotJudged are the invariants explore itself could not judge at its
	// faults (not_judged:): the file must not fail on them once fixed.
	NotJudged []string
}

// renders reports whether workload step i is in v's scenario: not an
// event v leaves out, nor an expect step all of whose checks it leaves out.
func (w *Workload) renders(i int, v Variant) bool {
	if v.Drop[i] {
		return false
	}
	return len(v.Unchecked) == 0 || !w.calls[i].Def.IsExpect() || withoutChecks(w.steps[i], v.Unchecked, true) != nil
}

// withoutChecks is a step with the checks keys left out of its expect (an
// expect step's own map, or a step's expect:), nil for an expect step with
// no check left (a within: alone waits for nothing).
func withoutChecks(st *yaml.Node, keys []string, isExpect bool) *yaml.Node {
	n := clone(st)
	exp := valueOf(n, "expect")
	if exp == nil || exp.Kind != yaml.MappingNode {
		return n
	}
	left := 0
	for i := 0; i+1 < len(exp.Content); {
		k, v := exp.Content[i].Value, exp.Content[i+1]
		if slices.Contains(broker.Names(), k) && v.Kind == yaml.MappingNode { // a broker's override
			dropKeys(v, keys)
			if len(v.Content) == 0 {
				exp.Content = append(exp.Content[:i], exp.Content[i+2:]...)
				continue
			}
		}
		switch {
		case slices.Contains(keys, k):
			exp.Content = append(exp.Content[:i], exp.Content[i+2:]...)
			continue
		case k != "within" && k != "every":
			left++
		}
		i += 2
	}
	if isExpect && left == 0 {
		return nil
	}
	return n
}

// dropKeys takes keys out of map m.
func dropKeys(m *yaml.Node, keys []string) {
	for i := 0; i+1 < len(m.Content); {
		if slices.Contains(keys, m.Content[i].Value) {
			m.Content = append(m.Content[:i], m.Content[i+2:]...)
			continue
		}
		i += 2
	}
}

// Render writes the variant as a scenario file in dir: the workload's own
// keys and steps, its system file named relative to dir, every start step
// supervised (restart: true) and armed with its faults.
func (w *Workload) Render(dir, name, comment string, v Variant) []byte {
	root := clone(w.root)
	setKey(root, "name", scalar(name))
	if keyOf(root, "description") != nil {
		what := "the workload " + w.Name + " alone, without a fault"
		if len(v.Faults) > 0 {
			what = "the workload " + w.Name + ", with " + faultList(w, v.Faults) + " (the comment above says what each does)"
		}
		setKey(root, "description", scalar(what))
	}
	if keyOf(root, "system") == nil { // next to the name, where a reader looks
		root.Content = append(root.Content[:2:2], append([]*yaml.Node{scalar("system"), nil}, root.Content[2:]...)...)
	}
	setKey(root, "system", scalar(relSystem(dir, w.System.File)))
	v.Pin.put(root)
	seq := &yaml.Node{Kind: yaml.SequenceNode}
	for i := range len(w.steps) + 1 {
		for _, f := range v.Faults {
			if f.Where == "step" && f.Step == i {
				seq.Content = append(seq.Content, faultStep(f, v.Optional)...)
			}
		}
		if i == len(w.steps) || !w.renders(i, v) {
			continue
		}
		st := w.steps[i]
		switch {
		case slices.Contains(w.Starts, i):
			seq.Content = append(seq.Content, w.startStep(i, st, v))
		case len(v.Unchecked) > 0:
			seq.Content = append(seq.Content, withoutChecks(st, v.Unchecked, false))
		default:
			seq.Content = append(seq.Content, clone(st))
		}
	}
	setKey(root, "steps", seq)
	var b bytes.Buffer
	for _, line := range strings.Split(strings.TrimSpace(comment), "\n") {
		if line != "" {
			fmt.Fprintf(&b, "# %s\n", line)
		}
	}
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	_ = enc.Encode(root) // a tree built from parsed nodes encodes
	_ = enc.Close()
	return b.Bytes()
}

// put writes the pin's keys into a scenario's root, before its steps:
// the workload's own settle: and not_judged: stand, the latter extended.
func (p Pin) put(root *yaml.Node) {
	if p.Broker != "" {
		setKeyBefore(root, "broker", scalar(p.Broker))
	}
	if p.Settle != "" && keyOf(root, "settle") == nil {
		setKeyBefore(root, "settle", scalar(p.Settle))
	}
	if len(p.NotJudged) == 0 {
		return
	}
	list := valueOf(root, "not_judged")
	if list == nil || list.Kind != yaml.SequenceNode {
		list = &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		setKeyBefore(root, "not_judged", list)
	}
	for _, inv := range p.NotJudged {
		if !slices.ContainsFunc(list.Content, func(n *yaml.Node) bool { return n.Value == inv }) {
			list.Content = append(list.Content, scalar(inv))
		}
	}
}

// setKeyBefore sets key in mapping m, in place when present, else just
// before steps: (where a reader of the file's header looks).
func setKeyBefore(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "steps" {
			m.Content = slices.Insert(m.Content, i, scalar(key), v)
			return
		}
	}
	m.Content = append(m.Content, scalar(key), v)
}

// startStep is start step i in map form, supervised, with its faults.
func (w *Workload) startStep(i int, orig *yaml.Node, v Variant) *yaml.Node {
	args := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
	for _, a := range w.calls[i].Args {
		switch a.Key {
		case "fault", "then", "restart":
			continue
		}
		args.Content = append(args.Content, scalar(a.Key), clone(a.Value))
	}
	for _, where := range []string{"", "also", "then"} {
		for _, f := range v.Faults {
			if f.Step == i && f.Where == where {
				args.Content = append(args.Content, scalar(cmpOr(where, "fault")), faultNode(f, v.Optional))
			}
		}
	}
	args.Content = append(args.Content, scalar("restart"), &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"})
	step := &yaml.Node{Kind: yaml.MappingNode}
	if orig.Kind == yaml.MappingNode {
		for k := 0; k+1 < len(orig.Content); k += 2 {
			if orig.Content[k].Value != "start" {
				step.Content = append(step.Content, clone(orig.Content[k]), clone(orig.Content[k+1]))
			}
		}
	}
	step.Content = append([]*yaml.Node{scalar("start"), args}, step.Content...)
	return step
}

// catchUp is how long a random schedule lets the services catch up before
// it arms a fault: the fault then meets the next event's work, not a
// backlog the producer ran ahead with.
const catchUp = "sleep(for=200ms)"

// faultStep is a fault: step arming f on its service's running process,
// after the services caught up.
func faultStep(f Fault, optional bool) []*yaml.Node {
	n := faultNode(f, optional)
	n.Content = append([]*yaml.Node{scalar("service"), scalar(f.Service)}, n.Content...)
	return []*yaml.Node{scalar(catchUp), {Kind: yaml.MappingNode, Content: []*yaml.Node{scalar("fault"), n}}}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func faultNode(f Fault, optional bool) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
	on := scalar(f.On.On())
	on.Style = yaml.DoubleQuotedStyle
	n.Content = append(n.Content, scalar("on"), on)
	if f.Nth > 1 {
		n.Content = append(n.Content, scalar("nth"), &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(f.Nth)})
	}
	n.Content = append(n.Content, scalar("do"), scalar(f.Do))
	if optional {
		n.Content = append(n.Content, scalar("optional"), &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"})
	}
	return n
}

func scalar(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

// setKey sets key in mapping m, in place when present, else appended.
func setKey(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, scalar(key), v)
}

// clone copies a node tree, comments and positions dropped.
func clone(n *yaml.Node) *yaml.Node {
	if n == nil {
		return nil
	}
	c := *n
	c.HeadComment, c.LineComment, c.FootComment = "", "", ""
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, k := range n.Content {
		c.Content[i] = clone(k)
	}
	return &c
}
