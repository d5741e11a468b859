package explore

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/internal/safe"
	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/sysrun"
)

// Boundary is one kind of crossing by one service process: a commit that
// wrote these tables, a broker command with this kind of reply.
type Boundary struct {
	Label string `json:"label"` // producer_db.commit(table=outbox), broker.XREADGROUP→entries
	Count int    `json:"count"`
	// Skip says why no fault is tried here ("" when points are): a
	// transaction that wrote nothing, a connection's setup, a boundary the
	// proxy could not attribute.
	Skip string `json:"skip,omitempty"`
}

// ServiceMap is what one service process of the fault-free run crossed.
type ServiceMap struct {
	Service    string     `json:"service"`
	Step       int        `json:"step"` // the workload's start step that started it
	Pos        diag.Pos   `json:"pos"`  // where that step is
	Boundaries []Boundary `json:"boundaries"`
	// Pass is the first unit of work: each kind of crossing once, in the
	// order first crossed (idle polls left out): "consumer_db.commit(…) → broker.XACK".
	Pass []string `json:"pass"`
}

// Map is the boundary map: each start step's process, in workload order.
type Map struct {
	Services []ServiceMap `json:"services"`
	// Unclassified are the links whose commits or statements the proxy
	// could not attribute, with why ("consumer consumer_db.commit: …"), as
	// unclassified holds them.
	Unclassified []string `json:"unclassified"`
	unclassified []sysrun.Unclassified
}

// setupCommands open or describe a connection: a fault there is a failed
// connect, which tells nothing about an outbox or inbox window.
var setupCommands = []string{"AUTH", "CLIENT", "COMMAND", "ECHO", "HELLO", "INFO", "PING", "QUIT", "READONLY", "RESET", "SELECT"}

// skipOf is why a crossing gets no point, "" when it gets points.
func skipOf(c fault.Crossing) string {
	switch {
	case c.Link == fault.Broker && (c.Setup || slices.Contains(setupCommands, c.Op)):
		return "connection setup"
	case c.Link == fault.Broker && c.Request != fault.Strikes && c.Response != fault.Strikes:
		return "no trigger can strike it"
	case c.Unattributed:
		return "unclassifiable: the proxy did not learn what this transaction wrote (see below)"
	case c.Link != fault.Broker && len(c.Tables) == 0:
		return "wrote nothing: no outcome to lose"
	}
	return ""
}

// idle: a read that handed out nothing; one such poll stands for all.
func idle(c fault.Crossing) bool { return c.Link == fault.Broker && c.Reply == "empty" }

// processes are the crossings of each start step's own process (the
// supervisor's restarts left out), by workload step.
func processes(w *Workload, xs []fault.Crossing) map[int][]fault.Crossing {
	out := map[int][]fault.Crossing{}
	for _, c := range xs {
		if c.Restart != 0 {
			continue
		}
		for _, i := range w.Starts {
			if w.calls[i].Pos == c.Start {
				out[i] = append(out[i], c)
			}
		}
	}
	return out
}

// BuildMap is the boundary map of a fault-free run.
func BuildMap(w *Workload, xs []fault.Crossing, unclassified []sysrun.Unclassified) Map {
	m := Map{unclassified: unclassified}
	for _, u := range unclassified {
		m.Unclassified = append(m.Unclassified, u.String())
	}
	procs := processes(w, xs)
	for _, i := range w.Starts {
		sm := ServiceMap{Service: w.Service(i), Step: i, Pos: w.calls[i].Pos}
		at := map[string]int{}
		for _, c := range procs[i] {
			l := c.Label()
			if k, ok := at[l]; ok {
				sm.Boundaries[k].Count++
				continue
			}
			at[l] = len(sm.Boundaries)
			sm.Boundaries = append(sm.Boundaries, Boundary{Label: l, Count: 1, Skip: skipOf(c)})
			if skipOf(c) == "" && !idle(c) {
				sm.Pass = append(sm.Pass, l)
			}
		}
		m.Services = append(m.Services, sm)
	}
	return m
}

// Print writes the map as the console shows it.
func (m Map) Print(out io.Writer) {
	for _, s := range m.Services {
		fmt.Fprintf(out, "  %s (started at %s)\n", safe.Line(s.Service), s.Pos)
		if len(s.Boundaries) == 0 {
			fmt.Fprintln(out, "    crossed nothing")
		}
		for _, b := range s.Boundaries {
			line := fmt.Sprintf("    %-58s ×%d", safe.Line(b.Label), b.Count)
			if b.Skip != "" {
				line += "   (no fault: " + b.Skip + ")"
			}
			fmt.Fprintln(out, line)
		}
		if len(s.Pass) > 0 {
			fmt.Fprintf(out, "    one pass: %s\n", safe.LongLine(strings.Join(s.Pass, " → ")))
		}
	}
	for _, u := range m.Unclassified {
		fmt.Fprintf(out, "  unclassifiable: %s\n", safe.Line(u))
	}
}
