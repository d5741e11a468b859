package runner

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"testing"

	"github.com/outboxdrill/runner/scenario"
)

func named(names ...string) []*scenario.Scenario {
	var scs []*scenario.Scenario
	for _, n := range names {
		scs = append(scs, &scenario.Scenario{Name: n})
	}
	return scs
}

func TestShardsCoverEveryScenarioOnce(t *testing.T) {
	var names []string
	for i := range 200 {
		names = append(names, fmt.Sprintf("scenario %d", i))
	}
	for _, n := range []int{1, 2, 3, 7} {
		seen := map[string]int{}
		for k := 1; k <= n; k++ {
			// Another file order must not change the split.
			shuffled := named(names...)
			rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			a := Select(&Params{Shard: Shard{k, n}}, named(names...))
			b := Select(&Params{Shard: Shard{k, n}}, shuffled)
			if len(a) != len(b) {
				t.Fatalf("shard %d/%d depends on file order: %d vs %d", k, n, len(a), len(b))
			}
			if n > 1 && (len(a) < 200/n/2 || len(a) > 200/n*2) {
				t.Errorf("shard %d/%d is lopsided: %d of 200", k, n, len(a))
			}
			for _, sc := range a {
				seen[sc.Name]++
			}
		}
		for _, name := range names {
			if seen[name] != 1 {
				t.Fatalf("%d shards: %q ran %d times", n, name, seen[name])
			}
		}
	}
}

func TestParseShard(t *testing.T) {
	if s, err := ParseShard("2/4"); err != nil || s != (Shard{2, 4}) {
		t.Errorf("2/4: %v %v", s, err)
	}
	for _, bad := range []string{"0/4", "5/4", "1", "a/b", "1/0", ""} {
		if _, err := ParseShard(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

func TestSelectTagsAndRun(t *testing.T) {
	scs := []*scenario.Scenario{
		{Name: "a", Tags: []string{"seed", "outbox"}},
		{Name: "b", Tags: []string{"seed", "inbox"}},
		{Name: "c", Tags: []string{"slow"}},
	}
	for _, tc := range []struct {
		p    Params
		want string
	}{
		{Params{Tags: []string{"seed"}}, "ab"},
		{Params{Tags: []string{"outbox", "slow"}}, "ac"},
		{Params{SkipTags: []string{"inbox"}}, "ac"},
		{Params{Tags: []string{"seed"}, SkipTags: []string{"outbox"}}, "b"},
		{Params{Run: regexp.MustCompile("^[bc]$"), SkipTags: []string{"slow"}}, "b"},
	} {
		got := ""
		for _, sc := range Select(&tc.p, scs) {
			got += sc.Name
		}
		if got != tc.want {
			t.Errorf("%+v: got %q, want %q", tc.p, got, tc.want)
		}
	}
}
