package report

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outboxdrill/runner/steps"
)

// Timeline is one scenario drawn as swim lanes, time going down: a lane
// per service process (each start its own), per database and for the
// broker; a row per wire operation (an arrow between two lanes), per mark
// on one lane (a fault, a process's end, a step's note) and per band
// across all of them (a step, a failure, the settle window's edges). The
// HTML report draws it; the Markdown's diagram of a team's system too.
type Timeline struct {
	Lanes []Lane
	Rows  []Row
	Start time.Time // what Row.At counts from: the first step's start
	// Cut counts the rows left out past MaxRows.
	Cut int
}

// MaxRows bounds a timeline: a run that went on for long is drawn up to
// here, then says how much it left out.
const MaxRows = 1500

// Lane kinds.
const (
	LaneProcess  = "process"
	LaneDatabase = "database"
	LaneBroker   = "broker"
)

// Lane is one lifeline.
type Lane struct {
	ID     string // a short id: PPG, B, CPG, R, C, P1 (the run's first process), …
	Title  string
	Kind   string
	Detail string // a process's start step, pid, fault and how it ended
	Killed bool   // a kill ended the process
	// From and To are the rows it lives through; To is len(Rows)-1 for
	// a lane alive at the end.
	From, To int
}

// Row kinds.
const (
	RowArrow = "arrow"
	RowMark  = "mark"
	RowBand  = "band"
)

// Row is one line of the timeline.
type Row struct {
	Kind  string
	Timed bool          // At is known (a wire operation, a step's start)
	At    time.Duration // since Timeline.Start
	Until time.Duration // the last of Count like operations
	Count int           // how many like operations it stands for (idle polls)
	// From and To are lanes (indexes): an arrow's ends; a mark's lane is
	// From; a band's are ignored.
	From, To int
	Text     string
	Reply    bool   // an arrow that answers (drawn dashed)
	Fault    string // the fault that struck here and how, "" for none
	Fail     bool   // a failed expectation
	Settling bool   // inside the settle window
	Step     int    // the scenario step it belongs to (index); -1 for the wire's
	// Witness are the violations (indexes into Result.Violations) whose
	// witness rests on this row.
	Witness []int

	key    time.Time // ordering
	events []WireEvent
	class  string
	idle   bool // an operation that carried nothing: collapsed with its like
	lane   int  // the process lane of a wire operation
}

// TimelineOf draws r: from its wire history for a team's system, from its
// steps' own drawing (steps.Drawn) for the reference pipeline.
func TimelineOf(r *Result) *Timeline {
	t := &Timeline{Start: timelineStart(r)}
	var rows []Row
	if r.Wire != nil {
		t.Lanes = teamLanes(r.Wire)
		rows = append(t.stepRows(r, teamParticipants(t.Lanes)), t.wireRows(r.Wire)...)
	} else {
		t.Lanes = referenceLanes()
		rows = t.stepRows(r, referenceParticipants)
	}
	rows = append(rows, t.settleRows(r)...)
	slices.SortStableFunc(rows, func(a, b Row) int { return a.key.Compare(b.key) })
	t.Rows = collapse(rows)
	if len(t.Rows) > MaxRows {
		t.Cut = len(t.Rows) - MaxRows
		t.Rows = append(t.Rows[:MaxRows], Row{Kind: RowBand, Step: -1, Text: fmt.Sprintf("… %d more rows not drawn", t.Cut)})
	}
	t.markSettling(r)
	t.markWitnesses(r)
	t.liveRanges(r.Wire)
	return t
}

// timelineStart is the first step's start, else the first operation's.
func timelineStart(r *Result) time.Time {
	for _, st := range r.Steps {
		if !st.At.IsZero() {
			return st.At
		}
	}
	if r.Wire != nil && len(r.Wire.Ops) > 0 {
		return r.Wire.Ops[0].At
	}
	return time.Time{}
}

// since is at on the timeline's clock; false for a zero time.
func (t *Timeline) since(at time.Time) (time.Duration, bool) {
	if at.IsZero() || t.Start.IsZero() {
		return 0, false
	}
	return at.Sub(t.Start), true
}

// referenceLanes are the reference pipeline's: its consumer is a process
// of its own between the broker and its database.
func referenceLanes() []Lane {
	return []Lane{
		{ID: "PPG", Title: "Producer PG", Kind: LaneDatabase},
		{ID: "R", Title: "Relay", Kind: LaneProcess},
		{ID: "B", Title: "Broker", Kind: LaneBroker},
		{ID: "C", Title: "Consumer", Kind: LaneProcess},
		{ID: "CPG", Title: "Consumer PG", Kind: LaneDatabase},
	}
}

// referenceParticipants place the steps' participants on referenceLanes.
var referenceParticipants = map[steps.Participant]int{steps.ProducerDB: 0, steps.RelayP: 1, steps.BrokerP: 2, steps.ConsumerDB: 4}

// consumerLane is the reference pipeline's consumer process lane: what a
// step draws between the broker and the consumer's database is the
// consumer's (a database never talks to a broker).
const consumerLane = 3

// teamLanes are the producer's database, the processes that publish,
// the broker, the processes that consume, the consumer's database: each
// process on the side of the database it wrote to (else of what it did on
// the broker), so that most arrows are short.
func teamLanes(w *Wire) []Lane {
	consumes := map[int]bool{}
	for _, op := range w.Ops {
		if op.Link == "consumer_db" || op.Link == "broker" && op.Class == ClassDeliver {
			consumes[op.Process] = true
		}
	}
	var left, right []Lane
	for _, p := range w.Processes {
		l := Lane{ID: fmt.Sprintf("P%d", p.N), Title: processTitle(p), Kind: LaneProcess, Detail: processDetail(p),
			Killed: strings.Contains(p.Ended, "killed")}
		if consumes[p.N] {
			right = append(right, l)
		} else {
			left = append(left, l)
		}
	}
	lanes := []Lane{{ID: "PPG", Title: "Producer PG", Kind: LaneDatabase, Detail: dbDetail(w, "producer_db")}}
	lanes = append(lanes, left...)
	lanes = append(lanes, Lane{ID: "B", Title: "Broker", Kind: LaneBroker})
	lanes = append(lanes, right...)
	return append(lanes, Lane{ID: "CPG", Title: "Consumer PG", Kind: LaneDatabase, Detail: dbDetail(w, "consumer_db")})
}

// dbDetail says what the services' proxies recorded on a database link,
// and what they never record, so that a lane with few arrows is not read
// as a service that did little there.
func dbDetail(w *Wire, link string) string {
	commits, learnt, stmts := 0, 0, 0
	for _, op := range w.Ops {
		switch {
		case op.Link != link:
		case op.Class == ClassCommit:
			commits++
			if !op.Unlearnt {
				learnt++
			}
		default:
			stmts++
		}
	}
	s := fmt.Sprintf("the services' proxies recorded %d COMMIT(s), %d with the tables they wrote", commits, learnt)
	if learnt < commits {
		s += " (the proxy asks the server what a transaction wrote only where a commit trigger is armed on this database, or explore observes)"
	}
	return s + fmt.Sprintf("; %d statement(s) by command (a statement is recorded only where a statement trigger is armed on this database); never SQL text", stmts)
}

func processTitle(p Process) string {
	if p.Restart > 0 {
		return fmt.Sprintf("%s (restart %d)", p.Service, p.Restart)
	}
	return fmt.Sprintf("%s #%d", p.Service, p.N)
}

func processDetail(p Process) string {
	parts := []string{"started at " + p.Start}
	if p.PID > 0 {
		parts = append(parts, fmt.Sprintf("pid %d", p.PID))
	}
	if p.Fault != "" {
		parts = append(parts, "fault "+p.Fault)
	}
	return strings.Join(append(parts, p.Ended), "; ")
}

// teamParticipants place the steps' participants on teamLanes: a team's
// relay is its processes, so the steps' Relay is drawn at the broker.
func teamParticipants(lanes []Lane) map[steps.Participant]int {
	b := slices.IndexFunc(lanes, func(l Lane) bool { return l.ID == "B" })
	return map[steps.Participant]int{steps.ProducerDB: 0, steps.RelayP: b, steps.BrokerP: b, steps.ConsumerDB: len(lanes) - 1}
}

// laneOf is the lane of process n.
func (t *Timeline) laneOf(n int) int {
	id := fmt.Sprintf("P%d", n)
	return slices.IndexFunc(t.Lanes, func(l Lane) bool { return l.ID == id })
}

// laneID is the lane with the id.
func (t *Timeline) laneID(id string) int {
	return slices.IndexFunc(t.Lanes, func(l Lane) bool { return l.ID == id })
}
