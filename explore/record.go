package explore

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/outboxdrill/runner/internal/guardfile"
	"github.com/outboxdrill/runner/internal/outfile"
	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/system"
)

// recordFormat changes whenever Record does: a merge reads its own only.
const recordFormat = 2

// MapFile is the name of a --map-only run's record in its --out.
const MapFile = "explore-map.json"

// RecordFile is the name of shard k of n's record in its --out.
func RecordFile(k, n int) string { return fmt.Sprintf("explore-shard-%d-of-%d.json", k, n) }

// recordKind caps what a merge reads: a depth-2 record of thousands of
// points with their reasons is megabytes, never hundreds.
var recordKind = guardfile.Kind{Name: "an explore shard record", Max: 256 << 20}

// Record is a shard's whole result as a merge needs it — every point with
// its start step, trigger, second fault and verdict, every finding with
// its schedule — which the JSON report (the points by name only) is not.
type Record struct {
	Format       int           `json:"format"`
	ID           ShardInfo     `json:"shard"`
	Out          string        `json:"out"`    // --out, as given
	System       string        `json:"system"` // the system file, as given
	Workload     string        `json:"workload"`
	WorkloadFile string        `json:"workload_file"`
	Observed     Verdict       `json:"observed"`
	Map          Map           `json:"boundary_map"`
	Points       []recPoint    `json:"points"`
	Findings     []recFinding  `json:"findings"`
	Took         time.Duration `json:"took"`
	Explore      time.Duration `json:"explore"`
	Parallel     int           `json:"parallel"`
}

// trigger is a point's fault.Trigger without its action (the point's Do
// says it, and an action may hold a function).
type trigger struct {
	Link     fault.Link
	Boundary fault.Boundary
	Filter   fault.Filter
}

func triggerOf(t fault.Trigger) trigger { return trigger{t.Link, t.Boundary, t.Filter} }

func (t trigger) fault() fault.Trigger {
	return fault.Trigger{Link: t.Link, Boundary: t.Boundary, Filter: t.Filter}
}

type recFault struct {
	Step    int
	Service string
	On      trigger
	Nth     int
	Do      string
	Where   string
}

type recPoint struct {
	ID       int
	Service  string
	Step     int
	On       trigger
	Nth      int
	Do       string
	Crossing string
	Pruned   string `json:",omitempty"`
	Listed   bool   `json:",omitempty"`
	Second   *recFault
	Shard    int
	Verdict  Verdict
}

type recFinding struct {
	Point      int // in Points; -1: the fault-free run
	Also       []string
	Broken     []string
	Why        string
	Faults     []recFault
	Drop       []int
	Unchecked  []string
	Shrunk     string
	Shrink     Shrinking
	File       string
	Reproduced int
	Tries      int
}

// RecordOf is res as its record (res.Identify first).
func RecordOf(res *Result, out string) *Record {
	w := res.Workload
	rec := &Record{Format: recordFormat, ID: *res.Shard, Out: out, System: w.System.File, Workload: w.Name, WorkloadFile: w.File,
		Observed: res.Observed, Map: res.Map, Took: res.Took, Explore: res.Explore, Parallel: res.Parallel}
	at := map[*Point]int{}
	for i, p := range res.Points {
		at[p] = i
		rp := recPoint{ID: p.ID, Service: p.Service, Step: p.Step, On: triggerOf(p.On), Nth: p.Nth, Do: p.Do, Crossing: p.Crossing,
			Pruned: p.Pruned, Listed: p.Listed, Shard: p.Shard, Verdict: p.Verdict}
		if p.Second != nil {
			s := recFaultOf(w, *p.Second)
			rp.Second = &s
		}
		rec.Points = append(rec.Points, rp)
	}
	for _, f := range res.Findings {
		rf := recFinding{Point: -1, Also: f.Also, Broken: f.Broken, Why: f.Why, Unchecked: f.Minimal.Unchecked,
			Shrunk: f.Shrunk, Shrink: f.Shrink, File: f.File, Reproduced: f.Reproduced, Tries: f.Tries}
		if i, ok := at[f.Point]; ok && f.Point != nil {
			rf.Point = i
		}
		for _, ft := range f.Minimal.Faults {
			rf.Faults = append(rf.Faults, recFaultOf(w, ft))
		}
		for i := range f.Minimal.Drop {
			rf.Drop = append(rf.Drop, i)
		}
		slices.Sort(rf.Drop)
		rec.Findings = append(rec.Findings, rf)
	}
	return rec
}

// recFaultOf is f with its service named: a merge has no workload to ask.
func recFaultOf(w *Workload, f Fault) recFault {
	return recFault{Step: f.Step, Service: w.serviceOf(f), On: triggerOf(f.On), Nth: f.Nth, Do: f.Do, Where: f.Where}
}

func (f recFault) fault() Fault {
	return Fault{Step: f.Step, Service: f.Service, On: f.On.fault(), Nth: f.Nth, Do: f.Do, Where: f.Where}
}

func (rp recPoint) point() *Point {
	p := &Point{ID: rp.ID, Service: rp.Service, Step: rp.Step, On: rp.On.fault(), Nth: rp.Nth, Do: rp.Do, Crossing: rp.Crossing,
		Pruned: rp.Pruned, Listed: rp.Listed, Shard: rp.Shard, Verdict: rp.Verdict}
	if rp.Second != nil {
		s := rp.Second.fault()
		p.Second = &s
	}
	return p
}

// key names a point apart from every other of a run: its start step,
// trigger, nth and action, and its second fault's.
func (rp recPoint) key() string {
	k := fmt.Sprintf("%d|%v|%d|%s", rp.Step, rp.On, rp.Nth, rp.Do)
	if s := rp.Second; s != nil {
		k += fmt.Sprintf("|%s|%v|%d|%s", s.Where, s.On, s.Nth, s.Do)
	}
	return k
}

// firstKey is a pair's first fault's key: its point's at depth 1.
func (rp recPoint) firstKey() string {
	rp.Second = nil
	return rp.key()
}

// numbering is the record's points as --map gives them to a run of w:
// depth 1's, not run yet, the map's positions said in w's file (the same
// workload, maybe written to another --out).
func (r *Record) numbering(w *Workload) ([]*Point, Map) {
	var ps []*Point
	for _, rp := range r.Points {
		if rp.Second != nil {
			continue
		}
		if strings.HasPrefix(rp.Pruned, anotherShard) {
			rp.Pruned = ""
		}
		if !rp.Listed {
			rp.Verdict = Verdict{}
		}
		rp.Shard = 0
		ps = append(ps, rp.point())
	}
	return ps, r.Map.rebased(r.WorkloadFile, w.File)
}

// rebased is m with the positions in file from said in to.
func (m Map) rebased(from, to string) Map {
	m.Services = slices.Clone(m.Services)
	for i := range m.Services {
		if m.Services[i].Pos.File == from {
			m.Services[i].Pos.File = to
		}
	}
	return m
}

// ToRun is how many points some shard runs (depth 2's pairs apart).
func (r *Record) ToRun() int {
	n := 0
	for _, rp := range r.Points {
		if rp.Shard != 0 && rp.Second == nil {
			n++
		}
	}
	return n
}

// Write writes the record to its place in out.
func (r *Record) Write(out string) error {
	name := MapFile
	if r.ID.Of > 0 {
		name = RecordFile(r.ID.Index, r.ID.Of)
	}
	body, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	return outfile.Write(filepath.Join(out, name), append(body, '\n'), 0o644)
}

// ReadRecord reads a record a shard or --map-only wrote.
func ReadRecord(ctx context.Context, file string) (*Record, error) {
	body, err := guardfile.Read(ctx, file, recordKind)
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%s: not an explore record: %v", file, err)
	}
	if r.Format != recordFormat {
		return nil, fmt.Errorf("%s: an explore record of format %d; this runner reads format %d (%s)", file, r.Format, recordFormat, r.ID.Build)
	}
	return &r, nil
}

// CheckMap says why r cannot number the points of a run of w by build
// on broker ("" when it can).
func (r *Record) CheckMap(ctx context.Context, w *Workload, build, broker string) (string, error) {
	wid, err := workloadID(ctx, w)
	switch {
	case err != nil:
		return "", err
	case r.ID.Build != build:
		return fmt.Sprintf("it was written by another build (%s; this is %s)", r.ID.Build, build), nil
	case r.ID.Workload != wid:
		return fmt.Sprintf("it maps another system file or workload (%s; this is %s)", r.ID.Workload, wid), nil
	case r.ID.Broker != broker:
		return fmt.Sprintf("it maps the points on %s, not %s", r.ID.Broker, broker), nil
	}
	return "", nil
}

// result is the record as a result: its workload a name and a system
// file's name only (what the reports say of it).
func (r *Record) result() *Result {
	w := &Workload{File: r.WorkloadFile, Name: r.Workload, System: &system.System{File: r.System}}
	id := r.ID
	res := &Result{Workload: w, Observed: r.Observed, Map: r.Map, Took: r.Took, Explore: r.Explore, Parallel: r.Parallel, Shard: &id}
	for _, rp := range r.Points {
		res.Points = append(res.Points, rp.point())
	}
	for _, rf := range r.Findings {
		res.Findings = append(res.Findings, rf.finding(res.Points))
	}
	return res
}

func (rf recFinding) finding(ps []*Point) *Finding {
	f := &Finding{Also: rf.Also, Broken: rf.Broken, Why: rf.Why, Shrunk: rf.Shrunk, Shrink: rf.Shrink, File: rf.File, Reproduced: rf.Reproduced, Tries: rf.Tries}
	if rf.Point >= 0 && rf.Point < len(ps) {
		f.Point = ps[rf.Point]
	}
	f.Minimal.Unchecked = rf.Unchecked
	for _, ft := range rf.Faults {
		f.Minimal.Faults = append(f.Minimal.Faults, ft.fault())
	}
	if len(rf.Drop) > 0 {
		f.Minimal.Drop = map[int]bool{}
		for _, i := range rf.Drop {
			f.Minimal.Drop[i] = true
		}
	}
	return f
}
