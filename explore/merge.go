package explore

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/internal/guardfile"
	"github.com/outboxdrill/runner/internal/outfile"
)

// MergeError is why the shards given are not the N parts of one
// exploration: every problem found, one a line.
type MergeError struct{ Problems []string }

func (e *MergeError) Error() string { return strings.Join(e.Problems, "\n") }

// shardRec is a shard's record and the directory it was read from (its
// finding files are there).
type shardRec struct {
	dir, file string
	rec       *Record
	owned     map[string]recPoint // the points it ran, by key
}

func (s *shardRec) String() string {
	return fmt.Sprintf("shard %d/%d (%s)", s.rec.ID.Index, s.rec.ID.Of, s.file)
}

// MergeDirs reads the shards' records in dirs (each a shard's --out),
// checks that they are the N parts of one exploration, and puts them
// together into the result one unsharded run gives: the first shard's
// numbering and boundary map, each point's verdict from the shard that
// ran it, depth 2's pairs after their first fault's point, the findings
// grouped as one run groups them. Their files are gathered into out.
func MergeDirs(ctx context.Context, dirs []string, out string) (*Result, error) {
	shards, err := readShards(ctx, dirs)
	if err != nil {
		return nil, err
	}
	if err := checkShards(shards); err != nil {
		return nil, err
	}
	res, from, err := combine(shards, out)
	if err != nil {
		return nil, err
	}
	return res, gather(ctx, res, from, shards[0], out)
}

// readShards reads every explore-shard-K-of-N.json in dirs, by shard.
func readShards(ctx context.Context, dirs []string) ([]*shardRec, error) {
	var out []*shardRec
	var probs []string
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "explore-shard-*-of-*.json"))
		if err == nil && len(files) == 0 {
			probs = append(probs, fmt.Sprintf("%s holds no explore-shard-K-of-N.json: give each shard's --out", dir))
		}
		for _, file := range files {
			rec, err := ReadRecord(ctx, file)
			if err != nil {
				probs = append(probs, err.Error())
				continue
			}
			out = append(out, &shardRec{dir: dir, file: file, rec: rec})
		}
	}
	if len(probs) > 0 {
		return nil, &MergeError{probs}
	}
	slices.SortStableFunc(out, func(a, b *shardRec) int { return a.rec.ID.Index - b.rec.ID.Index })
	return out, nil
}

// checkShards says every way the shards are not the N parts of one
// exploration: a shard missing or twice, another build, system file,
// workload, depth, broker or numbering than the first's.
func checkShards(shards []*shardRec) error {
	var probs []string
	n := shards[0].rec.ID.Of
	seen := map[int]*shardRec{}
	for _, s := range shards {
		id := s.rec.ID
		switch {
		case id.Of != n:
			probs = append(probs, fmt.Sprintf("%s is one of %d shards, %s one of %d", s, id.Of, shards[0], n))
		case seen[id.Index] != nil:
			probs = append(probs, fmt.Sprintf("shard %d/%d is there twice: %s and %s", id.Index, n, seen[id.Index].file, s.file))
		default:
			seen[id.Index] = s
		}
	}
	for k := 1; k <= n; k++ {
		if seen[k] == nil {
			probs = append(probs, fmt.Sprintf("shard %d/%d is missing (its --out has explore-shard-%d-of-%d.json once it ended)", k, n, k, n))
		}
	}
	for _, s := range shards[1:] {
		probs = append(probs, sameRun(shards[0], s)...)
	}
	if len(probs) > 0 {
		return &MergeError{probs}
	}
	return nil
}

// sameRun says how s ran another exploration than ref.
func sameRun(ref, s *shardRec) []string {
	a, b := ref.rec.ID, s.rec.ID
	var probs []string
	differs := func(what, got, want string) {
		if got != want {
			probs = append(probs, fmt.Sprintf("%s ran %s: %s; %s ran %s", s, what, got, ref, want))
		}
	}
	differs("another build", b.Build, a.Build)
	differs("another system file or workload", b.Workload, a.Workload)
	differs("another depth", fmt.Sprint(b.Depth), fmt.Sprint(a.Depth))
	differs("on another broker", b.Broker, a.Broker)
	// A shard whose workload did not hold numbered nothing: the merge
	// reports that, not a numbering.
	held := ref.rec.Observed.Outcome == Held && s.rec.Observed.Outcome == Held
	if len(probs) == 0 && held && b.Points != a.Points {
		probs = append(probs, fmt.Sprintf("%s numbered other points than %s (%s): its fault-free run crossed otherwise (a poll's count, an interleaving), or its --actions, --nth-cap or --only differ. Pin one numbering: runner explore --map-only, then each shard with --map OUT/%s",
			s, ref, pointsDiff(ref.rec, s.rec), MapFile))
	}
	return probs
}

// pointsDiff names a few points to run one record has and the other not.
func pointsDiff(a, b *Record) string {
	keys := func(r *Record) map[string]string {
		m := map[string]string{}
		for _, rp := range r.Points {
			if rp.Shard != 0 && rp.Second == nil {
				m[rp.key()] = rp.point().String()
			}
		}
		return m
	}
	ka, kb := keys(a), keys(b)
	var only []string
	for k, name := range kb {
		if _, ok := ka[k]; !ok {
			only = append(only, "+"+name)
		}
	}
	for k, name := range ka {
		if _, ok := kb[k]; !ok {
			only = append(only, "-"+name)
		}
	}
	slices.Sort(only)
	if len(only) > 4 {
		only = append(only[:4], fmt.Sprintf("and %d more", len(only)-4))
	}
	return fmt.Sprintf("%d to run against %d: %s", len(kb), len(ka), strings.Join(only, "; "))
}

// combine puts the checked shards together; from says which shard each
// finding's file is in. A shard whose fault-free run did not hold stands
// for the whole (as an unsharded run stops there).
func combine(shards []*shardRec, out string) (*Result, map[*Finding]*shardRec, error) {
	wfile := movedWorkload(shards[0].rec, out)
	for _, s := range shards {
		if s.rec.Observed.Outcome != Held {
			res := s.rec.result()
			res.Shard = nil
			from := map[*Finding]*shardRec{}
			for _, f := range res.Findings {
				from[f] = s
			}
			rebaseResult(res, s.rec.WorkloadFile, wfile)
			return res, from, nil
		}
	}
	res, err := mergePoints(shards, wfile)
	if err != nil {
		return nil, nil, err
	}
	from := mergeFindings(res, shards)
	for _, s := range shards[1:] {
		res.Took, res.Explore = max(res.Took, s.rec.Took), max(res.Explore, s.rec.Explore)
		res.Parallel += s.rec.Parallel
	}
	return res, from, nil
}

// movedWorkload is where the merge's workload file is: a built-in
// workload (written into its --out) moves with the findings to out.
func movedWorkload(r *Record, out string) string {
	if filepath.Dir(r.WorkloadFile) == filepath.Clean(r.Out) {
		return filepath.Join(out, filepath.Base(r.WorkloadFile))
	}
	return r.WorkloadFile
}

// mergePoints is the first shard's numbering with each point's verdict
// from the shard that ran it, then every shard's pairs after their first
// fault's point.
func mergePoints(shards []*shardRec, wfile string) (*Result, error) {
	base := shards[0].rec
	res := base.result()
	res.Shard, res.Points, res.Workload.File = nil, nil, wfile
	res.Map = base.Map.rebased(base.WorkloadFile, wfile)
	res.Observed.Why = rebaseText(res.Observed.Why, base.WorkloadFile, wfile)
	for _, s := range shards {
		s.owned = map[string]recPoint{}
		for _, rp := range s.rec.Points {
			if rp.Shard == s.rec.ID.Index && rp.Second == nil {
				rp.Verdict.Why = rebaseText(rp.Verdict.Why, s.rec.WorkloadFile, wfile)
				s.owned[rp.key()] = rp
			}
		}
	}
	at := map[string]int{} // a depth-1 point's key → its place
	for _, rp := range base.Points {
		if rp.Second != nil {
			continue
		}
		if rp.Shard > 0 {
			own, ok := shards[rp.Shard-1].owned[rp.key()]
			if !ok { // the numbering's hash said otherwise: a record edited by hand
				return nil, &MergeError{[]string{fmt.Sprintf("%s did not run %s, its own point", shards[rp.Shard-1], rp.point())}}
			}
			own.ID = rp.ID
			rp = own
		}
		at[rp.key()] = len(res.Points)
		res.Points = append(res.Points, rp.point())
	}
	res.Points = append(res.Points, mergePairs(shards, at, wfile)...)
	if base.ID.Depth >= 2 {
		for i, p := range res.Points {
			p.ID = i + 1
		}
	}
	return res, nil
}

// mergePairs are the shards' depth 2 pairs in an unsharded run's order:
// by their first fault's place, each first's in the order Pairs made
// them (one shard ran the first and made all of its pairs).
func mergePairs(shards []*shardRec, at map[string]int, wfile string) []*Point {
	type pair struct {
		first int
		p     *Point
	}
	var pairs []pair
	for _, s := range shards {
		for _, rp := range s.rec.Points {
			if rp.Second != nil {
				rp.Verdict.Why = rebaseText(rp.Verdict.Why, s.rec.WorkloadFile, wfile)
				pairs = append(pairs, pair{at[rp.firstKey()], rp.point()})
			}
		}
	}
	slices.SortStableFunc(pairs, func(a, b pair) int { return a.first - b.first })
	out := make([]*Point, len(pairs))
	for i, p := range pairs {
		out[i] = p.p
	}
	return out
}

// mergeFindings groups the shards' findings as one run's findings groups
// its violations (service, boundary, invariants): the finding of the
// first point stands, the other points are its Also, in order.
func mergeFindings(res *Result, shards []*shardRec) map[*Finding]*shardRec {
	place := map[string]int{}
	for i, p := range res.Points {
		place[pointKey(p)] = i
	}
	group := func(p *Point) string {
		return strings.Join([]string{p.Service, p.where(), strings.Join(p.Broken, ",")}, "|")
	}
	byGroup := map[string]*Finding{}
	from := map[*Finding]*shardRec{}
	for _, s := range shards {
		for _, rf := range s.rec.Findings {
			if rf.Point < 0 || rf.Point >= len(s.rec.Points) {
				continue
			}
			i, ok := place[s.rec.Points[rf.Point].key()]
			if !ok {
				continue
			}
			f := rf.finding(nil)
			f.Point, f.Why = res.Points[i], rebaseText(rf.Why, s.rec.WorkloadFile, res.Workload.File)
			if g := group(f.Point); byGroup[g] == nil || place[pointKey(byGroup[g].Point)] > i {
				byGroup[g] = f
			}
			from[f] = s
		}
	}
	res.Findings = nil
	for _, p := range res.Points {
		if f := byGroup[group(p)]; p.Outcome == Violated && f != nil {
			if f.Point == p {
				res.Findings = append(res.Findings, f)
				f.Also = nil
			} else {
				f.Also = append(f.Also, p.String())
			}
		}
	}
	return from
}

// pointKey is recPoint.key of a point.
func pointKey(p *Point) string {
	rp := recPoint{Step: p.Step, On: triggerOf(p.On), Nth: p.Nth, Do: p.Do}
	if p.Second != nil {
		s := recFault{On: triggerOf(p.Second.On), Nth: p.Second.Nth, Do: p.Second.Do, Where: p.Second.Where}
		rp.Second = &s
	}
	return rp.key()
}

// rebaseText is s with a position in the workload file from said in to.
func rebaseText(s, from, to string) string {
	if from == to || from == "" {
		return s
	}
	return strings.ReplaceAll(s, from+":", to+":")
}

// rebaseResult says a whole result's positions in the workload file to.
func rebaseResult(res *Result, from, to string) {
	res.Workload.File = to
	res.Map = res.Map.rebased(from, to)
	res.Observed.Why = rebaseText(res.Observed.Why, from, to)
	for _, f := range res.Findings {
		f.Why = rebaseText(f.Why, from, to)
	}
}

// gather copies each finding's file from its shard into out, as one run
// would have written it there: without the shard's line, its own path and
// the system file's said from out. A built-in workload comes along (the
// report's positions are in it).
func gather(ctx context.Context, res *Result, from map[*Finding]*shardRec, first *shardRec, out string) error {
	if err := outfile.Dir(out, 0o755); err != nil {
		return err
	}
	system := relSystem(out, res.Workload.System.File)
	if wf := first.rec.WorkloadFile; res.Workload.File != wf {
		err := copyFile(ctx, filepath.Join(first.dir, filepath.Base(wf)), res.Workload.File, func(body []byte) []byte { return resystem(body, system) })
		if err != nil {
			return err
		}
	}
	for _, f := range res.Findings {
		if f.File == "" {
			continue
		}
		old, dst := f.File, filepath.Join(out, filepath.Base(f.File))
		err := copyFile(ctx, filepath.Join(from[f].dir, filepath.Base(old)), dst, func(body []byte) []byte {
			return resystem(bytesReplace(unmark(body), old, dst), system)
		})
		if err != nil {
			return err
		}
		f.File = dst
	}
	return nil
}

// copyFile copies src to dst through edit.
func copyFile(ctx context.Context, src, dst string, edit func([]byte) []byte) error {
	body, err := guardfile.Read(ctx, src, guardfile.Scenario)
	if err != nil {
		return err
	}
	return outfile.Write(dst, edit(body), 0o644) // a scenario for anyone to read
}

func bytesReplace(body []byte, old, new string) []byte {
	if old == new {
		return body
	}
	return []byte(strings.ReplaceAll(string(body), old, new))
}

// resystem sets a scenario file's top-level system: line to file.
func resystem(body []byte, file string) []byte {
	v, err := yaml.Marshal(file)
	if err != nil {
		return body
	}
	lines := strings.SplitAfter(string(body), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "system: ") {
			lines[i] = "system: " + string(v)
			break
		}
	}
	return []byte(strings.Join(lines, ""))
}
