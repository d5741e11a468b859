package report_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/report/internal/teamfixture"
)

// laneIDs are a timeline's lanes, by id.
func laneIDs(t *report.Timeline) []string {
	var out []string
	for _, l := range t.Lanes {
		out = append(out, l.ID)
	}
	return out
}

// rowsLike are the rows whose text starts with prefix.
func rowsLike(t *report.Timeline, prefix string) []report.Row {
	var out []report.Row
	for _, r := range t.Rows {
		if strings.HasPrefix(r.Text, prefix) {
			out = append(out, r)
		}
	}
	return out
}

// The reference pipeline's timeline (for the HTML report) has a consumer
// process lane: what its steps draw between the broker and the
// consumer's database is the consumer's, its XACK from the consumer.
func TestHTMLTimelineReferencePipeline(t *testing.T) {
	rep := reportRun(t)
	r := rep.Results[1]
	tl := report.TimelineOf(r)
	if got := laneIDs(tl); !slices.Equal(got, []string{"PPG", "R", "B", "C", "CPG"}) {
		t.Fatalf("lanes %v", got)
	}
	acks := rowsLike(tl, "XACK ")
	if len(acks) == 0 {
		t.Fatalf("no XACK row:\n%+v", tl.Rows)
	}
	for _, a := range append(acks, rowsLike(tl, "XREADGROUP ")...) {
		if a.Kind != report.RowArrow || !(a.From == 3 && a.To == 2 || a.From == 2 && a.To == 3) {
			t.Errorf("%q: from lane %d to %d, want between the consumer (3) and the broker (2)", a.Text, a.From, a.To)
		}
	}
	faults := 0
	for _, row := range tl.Rows {
		if row.Fault != "" {
			faults++
		}
		if row.Kind == report.RowArrow && (row.From == 4 && row.To == 2 || row.From == 2 && row.To == 4) {
			t.Errorf("%q drawn between the broker and Consumer PG", row.Text)
		}
	}
	if faults < 3 { // fail=divzero, skip_mark, skip_ack
		t.Errorf("%d fault marks, want the scenario's 3 at least", faults)
	}
	if bands := rowsLike(tl, "t.yaml:3:5  produce("); len(bands) != 1 || !bands[0].Timed {
		t.Errorf("the first step's band: %+v", bands)
	}
}

// A team's timeline: a lane per process (each start its own, the killed
// one marked and ended), the databases and the broker; every wire
// operation an arrow in order with its time, the idle polls counted on
// one row; the faults marked with how they struck; the settle window; the
// violation on the delivery and the ack its witness rests on.
func TestHTMLTimelineTeamWire(t *testing.T) {
	r := teamfixture.Result(t, "", "")
	tl := report.TimelineOf(r)
	if got := laneIDs(tl); !slices.Equal(got, []string{"PPG", "P1", "P2", "B", "P3", "CPG"}) {
		t.Fatalf("lanes %v, want the relays left of the broker, the consumer right", got)
	}
	if !tl.Lanes[1].Killed || tl.Lanes[1].To >= len(tl.Rows)-1 || tl.Lanes[2].Killed || tl.Lanes[2].To != len(tl.Rows)-1 {
		t.Errorf("lanes' ends: %+v", tl.Lanes)
	}
	polls := rowsLike(tl, "XREADGROUP → empty")
	if len(polls) != 2 || polls[0].Count != 3 || polls[1].Count != 1 || !polls[1].Settling {
		t.Errorf("idle polls: %+v, want 3 on one row, then 1 in the settle window", polls)
	}
	xadd := rowsLike(tl, "XADD bus-1 → 1-0")
	if len(xadd) != 1 || !strings.Contains(xadd[0].Fault, "held, then the process killed") || !xadd[0].Timed || report.At(xadd[0].At) != "+0.100s" {
		t.Errorf("the struck XADD: %+v", xadd)
	}
	marks := rowsLike(tl, "⚡ FAULT ")
	if len(marks) != 2 || marks[0].Kind != report.RowMark || marks[0].From != 3 || marks[1].From != 5 {
		t.Errorf("fault marks: %+v, want one on the broker, one on Consumer PG", marks)
	}
	if ends := rowsLike(tl, "✕ killed by the fault"); len(ends) != 1 || ends[0].From != 1 {
		t.Errorf("the killed relay's end: %+v", ends)
	}
	var lit []string
	for _, row := range tl.Rows {
		if slices.Contains(row.Witness, 0) {
			lit = append(lit, row.Text)
		}
	}
	if !slices.Equal(lit, []string{"XREADGROUP 1-0 (bus-1)", "XACK 1-0"}) {
		t.Errorf("witness rows %q, want the first delivery and its ack", lit)
	}
	if got := rowsLike(tl, "XREADGROUP 1-0"); len(got) != 1 || got[0].From != 3 || got[0].To != 4 {
		t.Errorf("a delivery goes from the broker to its consumer: %+v", got)
	}
}

// teamLine is the grammar of every line of a team's diagram.
var teamLine = regexp.MustCompile(`^(sequenceDiagram|  participant (PPG|B|CPG|P\d+) as [^;#<>\n]+|  (PPG|B|CPG|P\d+)(->>|-->>|-x)(PPG|B|CPG|P\d+): [^;#<>\n]+|  Note over (PPG|B|CPG|P\d+)(,(PPG|B|CPG|P\d+))?: [^;#<>\n]+)$`)

// A team's Markdown diagram is its wire: arrows between the processes,
// the databases and the broker, a fault's ending in a cross, the
// violation named on its witness, with what Mermaid would read as syntax
// in a service's values kept out.
func TestHTMLTeamMermaidDiagram(t *testing.T) {
	r := teamfixture.Result(t, "#1;<b>%%", "")
	d := report.SequenceDiagram(r)
	for _, want := range []string{
		"  participant P1 as relayno. 1,‹b›%",
		"  P1-xB: +0.100s XADD bus-1no. 1,‹b›% → 1-0",
		"  Note over B: +0.100s ⚡ FAULT " + teamfixture.RelayKill + ": held, then the process killed",
		"  B->>P3: +0.400s XREADGROUP 1-0 (bus-1no. 1,‹b›%) ⚠ acked_without_effect",
		"  P3->>B: +0.410s XACK 1-0 ⚠ acked_without_effect",
		"  P3-xCPG: +0.420s COMMIT (inbox, projection)",
		"  P3->>B: +0.300s…+0.320s XREADGROUP → empty ×3",
		"  Note over PPG,CPG: +0.600s settle window: ",
		"  Note over P1: ✕ killed by the fault",
	} {
		if !strings.Contains(d, want) {
			t.Errorf("diagram lacks %q:\n%s", want, d)
		}
	}
	for _, line := range strings.Split(strings.TrimSuffix(d, "\n"), "\n") {
		if !teamLine.MatchString(line) {
			t.Errorf("line outside the emitted grammar: %q", line)
		}
	}
	checkWithMermaid(t, "```mermaid\n"+d+"```\n")
}

// The database statements the proxies recorded are drawn as arrows to
// their database, by command, the one a fault struck marked; each
// database lane says what its proxies recorded and what they never do.
func TestHTMLTimelineDatabaseStatements(t *testing.T) {
	r := teamfixture.Result(t, "", "")
	struck := "consumer_db.statement(table=inbox) nth=1 do=error"
	w := r.Wire
	w.Ops = append(w.Ops, report.WireOp{At: w.Ops[len(w.Ops)-1].At, Process: 3, Link: "consumer_db", Op: "INSERT", Tables: []string{"inbox"}, Fault: struck})
	for i, op := range w.Ops {
		if op.Link == "producer_db" {
			w.Ops[i].Unlearnt = true
		}
	}
	tl := report.TimelineOf(r)
	cpg, ppg := len(tl.Lanes)-1, 0
	ins := rowsLike(tl, "INSERT (inbox)")
	if len(ins) != 1 || ins[0].Kind != report.RowArrow || ins[0].To != cpg || tl.Lanes[ins[0].From].ID != "P3" || !strings.HasPrefix(ins[0].Fault, struck+": held, then answered with an error") {
		t.Errorf("the INSERT the fault struck: %+v, want one arrow from P3 to Consumer PG with its fault", ins)
	}
	if marks := rowsLike(tl, "⚡ FAULT "+struck); len(marks) != 1 || marks[0].From != cpg {
		t.Errorf("the fault's mark: %+v, want one on Consumer PG", marks)
	}
	for lane, want := range map[int][]string{
		cpg: {"recorded 2 COMMIT(s), 2 with the tables they wrote; 1 statement(s) by command", "never SQL text"},
		ppg: {"recorded 1 COMMIT(s), 0 with the tables they wrote (the proxy asks the server what a transaction wrote only where a commit trigger is armed", "0 statement(s)"},
	} {
		for _, s := range want {
			if !strings.Contains(tl.Lanes[lane].Detail, s) {
				t.Errorf("lane %s: %q lacks %q", tl.Lanes[lane].Title, tl.Lanes[lane].Detail, s)
			}
		}
	}
}
