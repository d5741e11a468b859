package explore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"os"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/internal/guardfile"
	"github.com/outboxdrill/runner/internal/outfile"
	"github.com/outboxdrill/runner/internal/version"
)

// Sharding: `runner explore --shard K/N` runs the K-th of N parts of the
// points on a CI machine of its own; `runner explore merge` puts the
// shards' records (record.go) back together into the result one unsharded
// run gives (merge.go). Each shard runs the fault-free run and numbers the
// points itself, so nothing passes between the machines before the merge —
// which checks that they all numbered the same points.

// ShardInfo says which shard a result is, and what a merge finds the same
// in every shard or refuses.
type ShardInfo struct {
	Index int    `json:"index"` // 1..Of; 0 for a --map-only record
	Of    int    `json:"of"`
	Build string `json:"build"` // internal/version
	// Workload is a hash of the system file's bytes and of the workload
	// (its YAML, wherever the system file lies).
	Workload string `json:"workload"`
	// Points is a hash of the points to run, in order: the numbering the
	// shards split. Pruned points are left out: an idle poll's count varies
	// from run to run, and no shard runs them.
	Points string `json:"points"`
	Depth  int    `json:"depth"`
	Broker string `json:"broker"`
}

func (s ShardInfo) String() string {
	return fmt.Sprintf("Shard %d/%d (%s; workload %s; points %s)", s.Index, s.Of, s.Build, s.Workload, s.Points)
}

// Partition gives each point to run (neither pruned nor decided) its shard,
// 1..n, from its place in the numbering alone — the points in Enumerate's
// order, never a run's timing — so the same points split the same on every
// machine. At depth 1 the points go round the shards in turn. At depth 2 the
// points whose pairs Pairs dedupes against each other (same service, kind of
// crossing and action) go to one shard together, the largest group first to
// the least loaded shard: a shard then makes the very pairs an unsharded run
// makes of its points.
func Partition(ps []*Point, n, depth int) {
	todo := runnable(ps)
	if depth < 2 {
		for i, p := range todo {
			p.Shard = i%n + 1
		}
		return
	}
	var keys []string
	groups := map[string][]*Point{}
	for _, p := range todo {
		k := p.Service + "|" + p.Crossing + "|" + p.Do // Pairs' key of the first fault
		if groups[k] == nil {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], p)
	}
	slices.SortStableFunc(keys, func(a, b string) int { return len(groups[b]) - len(groups[a]) })
	load := make([]int, n+1)
	for _, k := range keys {
		least := 1
		for s := 2; s <= n; s++ {
			if load[s] < load[least] {
				least = s
			}
		}
		load[least] += len(groups[k])
		for _, p := range groups[k] {
			p.Shard = least
		}
	}
}

// anotherShard is the pruned reason of a point another shard runs; the
// progress line counts them by what comes before the parenthesis.
const anotherShard = "another shard's"

// shard numbers the points as --map's record does when given (this run's
// fault-free run still had to hold), then, with --shard, keeps this
// shard's: the others are pruned as another shard's. A --map-only run's
// points are all one shard's: its record says which points there are to run.
func (e *explorer) shard(res *Result) {
	if e.p.Map != nil {
		res.Points, res.Map = e.p.Map.numbering(res.Workload)
		e.only(res.Points)
	}
	switch {
	case e.p.Shard.Of > 0:
		Partition(res.Points, e.p.Shard.Of, e.p.Depth)
	case e.p.MapOnly:
		Partition(res.Points, 1, e.p.Depth)
	}
	for _, p := range res.Points {
		if p.Shard != 0 && e.p.Shard.Of > 0 && p.Shard != e.p.Shard.Index {
			p.Pruned = fmt.Sprintf("%s (%d/%d)", anotherShard, p.Shard, e.p.Shard.Of)
		}
	}
}

// mapOnly marks the points to run not explored on a --map-only run (its
// record numbers them; no point runs), and reports whether it is one.
func (e *explorer) mapOnly(res *Result) bool {
	if !e.p.MapOnly {
		return false
	}
	for _, p := range runnable(res.Points) {
		p.Outcome, p.Why = NotRun, "--map-only: the points are numbered, none is run"
	}
	return true
}

// Identify sets res.Shard: the shard p ran (Index 0 for --map-only) and
// the identities a merge checks.
func (res *Result) Identify(ctx context.Context, p Params) error {
	wid, err := workloadID(ctx, res.Workload)
	if err != nil {
		return err
	}
	broker := ""
	if len(p.Runner.Brokers) > 0 {
		broker = p.Runner.Brokers[0]
	}
	res.Shard = &ShardInfo{Index: p.Shard.Index, Of: p.Shard.Of, Build: version.String(), Workload: wid,
		Points: pointsID(res.Points), Depth: p.Depth, Broker: broker}
	return nil
}

// workloadID hashes the system file's bytes and the workload's YAML, its
// system: key left out (where the file lies differs from machine to
// machine and in the built-in workload's --out; what it says does not).
func workloadID(ctx context.Context, w *Workload) (string, error) {
	sys, err := guardfile.Read(ctx, w.System.File, guardfile.System)
	if err != nil {
		return "", err
	}
	root := clone(w.root)
	setKey(root, "system", scalar(""))
	body, err := yaml.Marshal(root)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "system %d\n", len(sys))
	h.Write(sys)
	h.Write(body)
	return sum(h), nil
}

// pointsID hashes the points some shard runs (Partition gave them one),
// in order, each by what names it: its start step, its trigger, nth and
// action, the kind of crossing it strikes.
func pointsID(ps []*Point) string {
	h := sha256.New()
	for _, p := range ps {
		if p.Shard != 0 && p.Second == nil {
			fmt.Fprintf(h, "%d|%s|%s\n", p.Step, p.String(), p.Crossing)
		}
	}
	return sum(h)
}

func sum(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil))[:16] }

// shardHeader starts each finding file a shard wrote: which shard, build
// and numbering wrote it. A merge takes it off again.
const shardHeader = "# explore shard "

// MarkFindings puts res.Shard's line at the head of each finding file.
func (res *Result) MarkFindings() error {
	if res.Shard == nil || res.Shard.Of == 0 {
		return nil
	}
	for _, f := range res.Findings {
		if f.File == "" {
			continue
		}
		body, err := os.ReadFile(f.File)
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s%d/%d: %s; workload %s; points %s\n", shardHeader, res.Shard.Index, res.Shard.Of, res.Shard.Build, res.Shard.Workload, res.Shard.Points)
		if err := outfile.Write(f.File, append([]byte(line), body...), 0o644); err != nil { // a scenario for anyone to read
			return err
		}
	}
	return nil
}

// unmark takes a shard's line off a finding file's text.
func unmark(body []byte) []byte {
	if s := string(body); strings.HasPrefix(s, shardHeader) {
		_, rest, _ := strings.Cut(s, "\n")
		return []byte(rest)
	}
	return body
}
