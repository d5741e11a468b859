package runner

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	"github.com/outboxdrill/runner/scenario"
)

// Shard is the K-th of N shards (Index 1..Of).
type Shard struct{ Index, Of int }

// ParseShard reads "K/N".
func ParseShard(s string) (Shard, error) {
	k, n, ok := strings.Cut(s, "/")
	ki, err1 := strconv.Atoi(k)
	ni, err2 := strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil || ni < 1 || ki < 1 || ki > ni {
		return Shard{}, fmt.Errorf("--shard wants K/N with 1 ≤ K ≤ N, e.g. 2/4; got %q", s)
	}
	return Shard{Index: ki, Of: ni}, nil
}

// has reports whether the scenario named name belongs to this shard. The
// hash of the name (unique in a run) decides, so the split is the same on
// every machine and for every file order.
func (s Shard) has(name string) bool {
	if s.Of <= 1 {
		return true
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	return int(h.Sum64()%uint64(s.Of)) == s.Index-1
}

// Select keeps the scenarios p selects (--run, --tags, --skip-tags,
// --shard), in order.
func Select(p *Params, scs []*scenario.Scenario) []*scenario.Scenario {
	var out []*scenario.Scenario
	for _, sc := range Matching(p, scs) {
		if p.Shard.has(sc.Name) {
			out = append(out, sc)
		}
	}
	return out
}

// Matching keeps the scenarios --run, --tags and --skip-tags select, before
// sharding: when it is empty the selection is wrong, whatever the shard.
func Matching(p *Params, scs []*scenario.Scenario) []*scenario.Scenario {
	var out []*scenario.Scenario
	for _, sc := range scs {
		switch {
		case p.Run != nil && !p.Run.MatchString(sc.Name):
		case len(p.Tags) > 0 && !anyTag(sc.Tags, p.Tags):
		case anyTag(sc.Tags, p.SkipTags):
		default:
			out = append(out, sc)
		}
	}
	return out
}

func anyTag(have, want []string) bool {
	for _, t := range want {
		if slices.Contains(have, t) {
			return true
		}
	}
	return false
}

// SplitList splits a comma-separated flag value, dropping empty items.
func SplitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// Planned is one broker a run would run a scenario on, and why the run
// would skip it there before anything starts ("" when it would run it):
// the system file's brokers: or the scenario's pin exclude that broker.
// What only the servers can tell (a broker that cannot do what it asks)
// is decided when it runs.
type Planned struct {
	Broker, Skip string
}

// Plan is what runner run with p would do with sc, broker by broker
// (runner list shows it).
func (p *Params) Plan(sc *scenario.Scenario) []Planned {
	var out []Planned
	for _, b := range p.brokersOf(sc) {
		skip := sc.PinnedSkip(b)
		if sc.System != nil {
			skip = cmp.Or(sc.System.Unsupported(b), skip)
		}
		out = append(out, Planned{Broker: b, Skip: skip})
	}
	return out
}
