package explore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/runner"
)

// shardActions are the actions of the fake explorations below.
var shardActions = []string{"kill", "cut", "error", "delay(500ms)"}

// TestShardsPartitionThePoints: every point to run is in exactly one
// shard, the split is the numbering's alone (the same crossings split the
// same; more idle polls, pruned, change nothing), depth 1 is balanced and
// depth 2 keeps the points whose pairs dedupe together in one shard.
func TestShardsPartitionThePoints(t *testing.T) {
	w := defaultWorkload(t, t.TempDir())
	xs := consumerCrossings(w)
	split := func(xs []fault.Crossing, n, depth int) map[string]int {
		ps := Enumerate(w, xs, shardActions, 3)
		Partition(ps, n, depth)
		out := map[string]int{}
		for _, p := range ps {
			if p.Pruned != "" && p.Shard != 0 {
				t.Errorf("pruned %s is in shard %d", p, p.Shard)
			}
			if p.Pruned == "" {
				out[p.String()] = p.Shard
			}
		}
		return out
	}
	more := append(consumerCrossings(w), consumerCrossings(w)[len(xs)-3:]...) // three more idle polls at the end
	for _, depth := range []int{1, 2} {
		for n := 1; n <= 8; n++ {
			got := split(xs, n, depth)
			load := make([]int, n+1)
			for p, s := range got {
				if s < 1 || s > n {
					t.Fatalf("depth %d, %d shards: %s in shard %d", depth, n, p, s)
				}
				load[s]++
			}
			if again := split(more, n, depth); !sameSplit(got, again) {
				t.Errorf("depth %d, %d shards: the split changed with more idle polls:\n%v\n%v", depth, n, got, again)
			}
			if lo, hi := minMax(load[1:]); depth == 1 && hi-lo > 1 {
				t.Errorf("%d shards: %v points a shard, want them within one", n, load[1:])
			}
		}
	}
	// Depth 2: a first fault's pairs dedupe against those of its group's.
	ps := Enumerate(w, xs, shardActions, 3)
	Partition(ps, 8, 2)
	group := map[string]int{}
	for _, p := range runnable(ps) {
		k := p.Service + "|" + p.Crossing + "|" + p.Do
		if s, ok := group[k]; ok && s != p.Shard {
			t.Errorf("%s: shard %d, its group's is %d", p, p.Shard, s)
		}
		group[k] = p.Shard
	}
}

func sameSplit(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func minMax(xs []int) (lo, hi int) {
	lo, hi = xs[0], xs[0]
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

// fakeRun is an exploration of w's consumer without servers: the points
// of consumerCrossings, shard's share of them (all without one), each
// judged by verdictOf, its findings grouped and written as explore does.
func fakeRun(t *testing.T, w *Workload, shard runner.Shard, out string) *Result {
	t.Helper()
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	res := &Result{Workload: w, Observed: Verdict{Outcome: Held}, Parallel: 2, Took: time.Second, Explore: time.Second}
	res.Map = BuildMap(w, consumerCrossings(w), nil)
	res.Points = Enumerate(w, consumerCrossings(w), shardActions, 3)
	e := &explorer{p: Params{Out: out, Shard: shard, Depth: 1, Runner: runner.Params{Brokers: []string{"redis"}}}}
	e.shard(res)
	for _, p := range runnable(res.Points) {
		p.Verdict = verdictOf(p)
	}
	byKey := map[string]*Finding{}
	for _, p := range res.Points {
		if p.Outcome != Violated {
			continue
		}
		key := p.Service + "|" + p.where() + "|" + strings.Join(p.Broken, ",")
		if f := byKey[key]; f != nil {
			f.Also = append(f.Also, p.String())
			continue
		}
		f := &Finding{Point: p, Broken: p.Broken, Why: p.Why, Minimal: Variant{Faults: p.Faults()}, Shrunk: "1 → 1 event(s)", Reproduced: 1, Tries: 1}
		if err := e.write(w, f); err != nil {
			t.Fatal(err)
		}
		byKey[key] = f
		res.Findings = append(res.Findings, f)
	}
	if shard.Of > 0 {
		if err := res.Identify(context.Background(), e.p); err != nil {
			t.Fatal(err)
		}
		if err := res.MarkFindings(); err != nil {
			t.Fatal(err)
		}
		if err := RecordOf(res, out).Write(out); err != nil {
			t.Fatal(err)
		}
	}
	return res
}

// verdictOf: an error at a commit loses the event, a kill at an XACK
// redelivers it; the rest holds.
func verdictOf(p *Point) Verdict {
	switch {
	case p.Do == "error" && p.On.Link == fault.ConsumerDB:
		return Verdict{Outcome: Violated, Broken: []string{"lost"}, Why: "lost: event pay-1", Took: time.Second}
	case p.Do == "kill" && p.On.Filter.Command == "XACK":
		return Verdict{Outcome: Violated, Broken: []string{"double_applied"}, Why: "double_applied: event pay-2", Took: time.Second}
	}
	return Verdict{Outcome: Held, Took: 2 * time.Second, Unjudged: map[string]string{"stuck": "no progress reading"}}
}

// timings are the JSON report's seconds.
var timings = regexp.MustCompile(`"seconds": [0-9.e+-]+`)

func reportJSON(t *testing.T, res *Result, out string) string {
	t.Helper()
	var b bytes.Buffer
	if err := res.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(timings.ReplaceAllString(b.String(), `"seconds": 0`), out+string(filepath.Separator), "OUT/")
}

// TestMergedShardsAreTheUnshardedRun: the merge of 1, 2, 3 and 8 shards
// writes the JSON report one unsharded run writes, apart from timings:
// the same points, outcomes and findings — a finding whose points two
// shards both broke is one, its other points its also — and gathers the
// finding files as that run wrote them.
func TestMergedShardsAreTheUnshardedRun(t *testing.T) {
	w := defaultWorkload(t, t.TempDir())
	uout := filepath.Join(t.TempDir(), "found")
	unsharded := fakeRun(t, w, runner.Shard{}, uout)
	want := reportJSON(t, unsharded, uout)
	if len(unsharded.Findings) != 3 || len(unsharded.Findings[0].Also) == 0 {
		t.Fatalf("the fake run's findings: %d, want 3, the first with also", len(unsharded.Findings))
	}
	for _, n := range []int{1, 2, 3, 8} {
		var dirs []string
		for k := 1; k <= n; k++ {
			dirs = append(dirs, filepath.Join(t.TempDir(), "found"))
			fakeRun(t, w, runner.Shard{Index: k, Of: n}, dirs[k-1])
		}
		mout := filepath.Join(t.TempDir(), "found")
		merged, err := MergeDirs(context.Background(), dirs, mout)
		if err != nil {
			t.Fatalf("%d shards: %v", n, err)
		}
		if got := reportJSON(t, merged, mout); got != want {
			t.Errorf("%d shards: the merged JSON report differs from the unsharded one:\n%s\nwant:\n%s", n, got, want)
		}
		for _, f := range unsharded.Findings {
			body, _ := os.ReadFile(f.File)
			got, err := os.ReadFile(filepath.Join(mout, filepath.Base(f.File)))
			if wantBody := strings.ReplaceAll(string(body), uout, mout); err != nil || string(got) != wantBody {
				t.Errorf("%d shards: %s gathered as (%v)\n%s\nwant\n%s", n, f.File, err, got, wantBody)
			}
		}
	}
}

// TestMergeRefusesWhatIsNotOneExploration: a shard missing or twice, a
// shard of another build, workload or numbering, a directory that is no
// shard's: exit 2's problems, all of them.
func TestMergeRefusesWhatIsNotOneExploration(t *testing.T) {
	w := defaultWorkload(t, t.TempDir())
	dirs := []string{filepath.Join(t.TempDir(), "found"), filepath.Join(t.TempDir(), "found")}
	for k, dir := range dirs {
		fakeRun(t, w, runner.Shard{Index: k + 1, Of: 2}, dir)
	}
	edited := func(edit func(*Record)) string {
		r, err := ReadRecord(context.Background(), filepath.Join(dirs[1], RecordFile(2, 2)))
		if err != nil {
			t.Fatal(err)
		}
		edit(r)
		dir := t.TempDir()
		if err := r.Write(dir); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	// A shard whose workload did not hold without a fault numbered no
	// point: the merge is that violation, as one run would be.
	broke := edited(func(r *Record) {
		r.Observed, r.Points, r.ID.Points = Verdict{Outcome: Violated, Broken: []string{"lost"}, Why: "lost: ev-1"}, nil, "sha256:none"
		r.Findings = []recFinding{{Point: -1, Broken: []string{"lost"}, Why: "lost: ev-1"}}
	})
	if res, err := MergeDirs(context.Background(), []string{dirs[0], broke}, t.TempDir()); err != nil || res.Observed.Outcome != Violated || len(res.Findings) != 1 {
		t.Errorf("a shard whose workload broke: %v, %+v", err, res)
	}
	for _, tc := range []struct {
		dirs []string
		want string
	}{
		{dirs[:1], "shard 2/2 is missing"},
		{[]string{dirs[0], dirs[1], dirs[1]}, "shard 2/2 is there twice"},
		{[]string{dirs[0], t.TempDir()}, "holds no explore-shard-K-of-N.json"},
		{[]string{dirs[0], edited(func(r *Record) { r.ID.Build = "runner 0123abcd" })}, "ran another build: runner 0123abcd"},
		{[]string{dirs[0], edited(func(r *Record) { r.ID.Workload = "sha256:0" })}, "ran another system file or workload"},
		{[]string{dirs[0], edited(func(r *Record) { r.ID.Points = "sha256:0" })}, "numbered other points than shard 1/2"},
		{[]string{dirs[0], edited(func(r *Record) { r.ID.Of = 3 })}, "is one of 3 shards"},
	} {
		_, err := MergeDirs(context.Background(), tc.dirs, t.TempDir())
		var merr *MergeError
		if !errors.As(err, &merr) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want a MergeError saying %q", tc.dirs, err, tc.want)
		}
	}
}

// TestShardReportsSayWhichShard: a shard's JSON report and finding files
// carry its number, the build and both identities; an unsharded run's
// carry none.
func TestShardReportsSayWhichShard(t *testing.T) {
	w := defaultWorkload(t, t.TempDir())
	out := filepath.Join(t.TempDir(), "found")
	res := fakeRun(t, w, runner.Shard{Index: 2, Of: 3}, out)
	var b bytes.Buffer
	if err := res.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var got struct{ Shard *ShardInfo }
	if err := json.Unmarshal(b.Bytes(), &got); err != nil || got.Shard == nil || got.Shard.Index != 2 || got.Shard.Of != 3 ||
		!strings.HasPrefix(got.Shard.Workload, "sha256:") || !strings.HasPrefix(got.Shard.Points, "sha256:") || got.Shard.Build == "" {
		t.Errorf("the JSON report's shard: %+v (%v)", got.Shard, err)
	}
	for _, f := range res.Findings {
		if body, _ := os.ReadFile(f.File); !strings.HasPrefix(string(body), "# explore shard 2/3: runner ") {
			t.Errorf("%s does not say its shard:\n%s", f.File, body)
		}
	}
	plain := fakeRun(t, w, runner.Shard{}, filepath.Join(t.TempDir(), "found"))
	b.Reset()
	if err := plain.WriteJSON(&b); err != nil || strings.Contains(b.String(), `"shard"`) {
		t.Errorf("an unsharded report names a shard (%v):\n%s", err, b.String())
	}
}
