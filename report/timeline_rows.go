package report

import (
	"fmt"
	"strings"
	"time"

	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/steps"
)

// stepRows are each step's band at its start, then what the step drew of
// its run (steps.Drawn) and its failures, at its end: a step's results
// are known once it is done.
func (t *Timeline) stepRows(r *Result, parts map[steps.Participant]int) []Row {
	var rows []Row
	for i, st := range r.Steps {
		at, timed := t.since(st.At)
		head := Row{Kind: RowBand, Timed: timed, At: at, Step: i, Text: st.Call.Pos.String() + "  " + st.Call.String(), key: st.At}
		if st.Call.Label != "" {
			head.Text += " # " + st.Call.Label
		}
		d := &laneDiagram{parts: parts, step: i, call: st.Call.String(), consumer: -1}
		if !st.At.IsZero() {
			d.key = st.At.Add(st.Duration)
		}
		if r.Wire == nil {
			d.consumer = consumerLane
		}
		st.Call.Draw(d, st.Result)
		for _, f := range st.Failures {
			d.add(Row{Kind: RowBand, Fail: true, Text: "FAIL " + f.Key + ": " + summary(f.Msg)})
		}
		rows = append(append(rows, head), d.rows...)
	}
	return rows
}

// laneDiagram is a steps.Diagram drawing one step's run as rows.
type laneDiagram struct {
	parts    map[steps.Participant]int
	step     int
	key      time.Time
	call     string // the step's call: a note of it alone repeats its band
	consumer int    // the consumer process's lane, -1 for none
	rows     []Row
}

func (d *laneDiagram) add(r Row) {
	r.Step, r.key = d.step, d.key
	d.rows = append(d.rows, r)
}

// Msg draws an arrow; one between the broker and the consumer's database
// is the consumer process's (a database never talks to a broker).
func (d *laneDiagram) Msg(from, to steps.Participant, arrow, text string) {
	f, t := d.parts[from], d.parts[to]
	if d.consumer >= 0 && from == steps.BrokerP && to == steps.ConsumerDB {
		t = d.consumer
	}
	if d.consumer >= 0 && from == steps.ConsumerDB && to == steps.BrokerP {
		f = d.consumer
	}
	d.add(Row{Kind: RowArrow, From: f, To: t, Reply: arrow == "-->>", Text: text})
}

// Note marks one lane, or bands them all; a FAULT note is the fault's mark.
func (d *laneDiagram) Note(text string, over ...steps.Participant) {
	if text == d.call {
		return
	}
	if len(over) != 1 {
		d.add(Row{Kind: RowBand, Text: text})
		return
	}
	row := Row{Kind: RowMark, From: d.parts[over[0]], To: d.parts[over[0]], Text: text}
	if f, ok := strings.CutPrefix(text, "FAULT "); ok {
		row.Fault = f
	}
	d.add(row)
}

// wireRows are the team's wire operations, each an arrow between its
// process and the database or broker it crossed to (a delivery from the
// broker), then a mark where a process ended.
func (t *Timeline) wireRows(w *Wire) []Row {
	var rows []Row
	links := map[string]int{"producer_db": 0, "broker": t.laneID("B"), "consumer_db": len(t.Lanes) - 1}
	for _, op := range w.Ops {
		p := t.laneOf(op.Process)
		at, timed := t.since(op.At)
		row := Row{Kind: RowArrow, Timed: timed, At: at, Until: at, Step: -1, From: p, To: links[op.Link], Text: opText(op),
			key: op.At, events: op.Events, class: op.Class, lane: p, idle: len(op.Events) == 0 && op.Fault == "" && len(op.Tables) == 0}
		if op.Class == ClassDeliver {
			row.From, row.To = row.To, row.From
		}
		rows = append(rows, row)
		if op.Fault != "" { // the fault's own mark, where it struck
			rows[len(rows)-1].Fault = op.Fault + ": " + struck(op.Fault)
			rows = append(rows, Row{Kind: RowMark, Timed: timed, At: at, Step: -1, From: row.To, To: row.To, lane: p, key: op.At,
				Text: "⚡ FAULT " + op.Fault + ": " + struck(op.Fault), Fault: op.Fault + ": " + struck(op.Fault)})
		}
	}
	return append(rows, t.endRows(w)...)
}

// endRows mark each process that ended, after its last operation.
func (t *Timeline) endRows(w *Wire) []Row {
	last := map[int]time.Time{}
	for _, op := range w.Ops {
		last[op.Process] = op.At
	}
	var rows []Row
	for _, p := range w.Processes {
		at, ok := last[p.N]
		if !ok || strings.HasPrefix(p.Ended, "still running") {
			continue
		}
		mark := "■ " + p.Ended
		if strings.Contains(p.Ended, "killed") {
			mark = "✕ " + p.Ended
		}
		l := t.laneOf(p.N)
		rows = append(rows, Row{Kind: RowMark, Step: -1, From: l, To: l, Text: mark, key: at, lane: l})
	}
	return rows
}

// opText is a wire operation's label: "XADD bus-1 → 1-0", "XREADGROUP
// 1-0 (bus-1)", "XACK 1-0", "COMMIT (inbox, projection)".
func opText(op WireOp) string {
	text := op.Op
	if len(op.Tables) > 0 {
		text += " (" + strings.Join(op.Tables, ", ") + ")"
	}
	var ids []string
	for i, e := range op.Events {
		if i == 3 {
			ids = append(ids, fmt.Sprintf("+%d more", len(op.Events)-3))
			break
		}
		switch op.Class {
		case ClassPublish:
			ids = append(ids, strings.TrimSuffix(e.EventID+" → "+e.EntryID, " → "))
		case ClassDeliver:
			ids = append(ids, strings.TrimSuffix(e.EntryID+" ("+e.EventID+")", " ()"))
		default:
			ids = append(ids, cmpOr(e.EntryID, e.EventID))
		}
	}
	if len(ids) > 0 {
		text += " " + strings.Join(ids, ", ")
	}
	switch op.Reply {
	case "error", "none", "empty":
		text += " → " + op.Reply
	}
	return text
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// struck says how a fault struck, from its action ("… do=kill"): the
// proxy held the operation, then acted.
func struck(fault string) string {
	_, do, _ := strings.Cut(fault, "do=")
	do, _, _ = strings.Cut(do, " ")
	switch {
	case do == "kill":
		return "held, then the process killed"
	case do == "error":
		return "held, then answered with an error"
	case do == "cut":
		return "held, then the connection cut"
	case strings.HasPrefix(do, "delay"):
		return "held, then passed on after a " + do
	case do == "duplicate":
		return "passed on twice"
	case do == "drop":
		return "dropped"
	}
	return "struck"
}

// settleRows bound the settle window of a team's system.
func (t *Timeline) settleRows(r *Result) []Row {
	if r.SettleStart.IsZero() {
		return nil
	}
	from, _ := t.since(r.SettleStart)
	to, _ := t.since(r.SettleEnd)
	end := "settle window ends: " + cmpOr(r.Settled, "not settled")
	return []Row{
		{Kind: RowBand, Timed: true, At: from, Step: -1, Text: "settle window: the system runs on after the last step until it settles", key: r.SettleStart},
		{Kind: RowBand, Timed: true, At: to, Step: -1, Text: end, key: r.SettleEnd},
	}
}

// collapse merges each idle operation (one that carried nothing: a poll
// that found nothing) into the last like one of its process since that
// process did anything else, or a step or the settle window began,
// counting them.
func collapse(rows []Row) []Row {
	out := make([]Row, 0, len(rows))
	open := map[int]map[string]int{} // process lane → text → its idle row in out
	for _, r := range rows {
		r.Count = 1
		if r.Kind == RowBand { // a step, the settle window: polls after it are drawn after it
			clear(open)
		}
		if r.Kind != RowArrow || r.Step >= 0 {
			out = append(out, r)
			continue
		}
		if !r.idle {
			delete(open, r.lane)
			out = append(out, r)
			continue
		}
		if i, ok := open[r.lane][r.Text]; ok {
			out[i].Count++
			out[i].Until = r.At
			continue
		}
		if open[r.lane] == nil {
			open[r.lane] = map[string]int{}
		}
		open[r.lane][r.Text] = len(out)
		out = append(out, r)
	}
	return out
}

// markSettling flags the rows inside the settle window.
func (t *Timeline) markSettling(r *Result) {
	if r.SettleStart.IsZero() {
		return
	}
	in := false
	for i := range t.Rows {
		row := &t.Rows[i]
		if row.Kind == RowBand && row.Step == -1 && strings.HasPrefix(row.Text, "settle window") {
			row.Settling = true
			in = !in
			continue
		}
		row.Settling = in
	}
}

// markWitnesses flags the rows each violation's witness rests on.
func (t *Timeline) markWitnesses(r *Result) {
	for vi, v := range r.Violations {
		for _, op := range v.Witness {
			for _, i := range t.witnessRows(op, len(r.Steps)) {
				if !containsInt(t.Rows[i].Witness, vi) {
					t.Rows[i].Witness = append(t.Rows[i].Witness, vi)
				}
			}
		}
	}
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// witnessRows are the rows op rests on: a step's op on the rows its step
// drew that name its entry (else event), or the step's band; a wire op
// on the operations that carried its entry (else event), of its class.
func (t *Timeline) witnessRows(op history.Op, nSteps int) []int {
	id := cmpOr(op.EntryID, op.EventID)
	var hits []int
	if op.StepN < nSteps {
		head := -1
		for i, row := range t.Rows {
			if row.Step != op.StepN || row.Fail {
				continue
			}
			if row.Kind == RowBand && head < 0 {
				head = i
			} else if id != "" && hasToken(row.Text, id) && (!row.Reply || op.Acked) {
				hits = append(hits, i)
			}
		}
		if len(hits) == 0 && head >= 0 {
			hits = []int{head}
		}
		return hits
	}
	for i, row := range t.Rows {
		if row.Step == -1 && witnessClass(op, row.class) && carries(row.events, op) {
			hits = append(hits, i)
		}
	}
	return hits
}

// witnessClass: a publish rests on publishes; a delivery on deliveries,
// and on the ack when it was acked.
func witnessClass(op history.Op, class string) bool {
	switch op.Kind {
	case history.Publish:
		return class == ClassPublish
	case history.Commit, history.Purge, history.Pass:
		return false
	}
	return class == ClassDeliver || class == ClassAck && op.Acked
}

func carries(es []WireEvent, op history.Op) bool {
	for _, e := range es {
		if op.EntryID != "" && e.EntryID == op.EntryID || op.EntryID == "" && op.EventID != "" && e.EventID == op.EventID {
			return true
		}
	}
	return false
}

// hasToken reports whether id is one of text's words (split at blanks,
// parentheses, commas, colons and arrows).
func hasToken(text, id string) bool {
	for _, w := range strings.FieldsFunc(text, func(r rune) bool { return strings.ContainsRune(" \t(),:→←", r) }) {
		if w == id {
			return true
		}
	}
	return false
}

// liveRanges bound each process lane to the rows it lived through: from
// its start step (or its first operation) to its end mark (or the end).
func (t *Timeline) liveRanges(w *Wire) {
	for i := range t.Lanes {
		t.Lanes[i].From, t.Lanes[i].To = 0, len(t.Rows)-1
	}
	if w == nil {
		return
	}
	for _, p := range w.Processes {
		l := t.laneOf(p.N)
		first, last := -1, -1
		for i, row := range t.Rows {
			starts := p.Restart == 0 && row.Kind == RowBand && row.Step >= 0 && strings.HasPrefix(row.Text, p.Start+"  ")
			touches := row.Kind != RowBand && (row.From == l || row.To == l)
			if first < 0 && (starts || touches) {
				first = i
			}
			if touches {
				last = i
			}
		}
		if first >= 0 {
			t.Lanes[l].From = first
		}
		if last >= 0 && !strings.HasPrefix(p.Ended, "still running") {
			t.Lanes[l].To = last
		}
	}
}
