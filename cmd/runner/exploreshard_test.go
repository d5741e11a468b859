package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"gopkg.in/yaml.v3"
)

// shardTimings are what differs between two runs of the same points: each
// point's and the whole run's seconds.
var shardTimings = regexp.MustCompile(`"seconds": [0-9.e+-]+`)

// TestExploreShardsMergeIntoTheUnshardedRun: on the reference system, the
// points numbered once (--map-only), then run unsharded and as two shards
// side by side: `runner explore merge` writes the unsharded run's JSON
// report, apart from timings and the --out named. A merge missing a
// shard, or with a shard of another workload, exits 2 saying so, and so
// does a --map of another workload.
func TestExploreShardsMergeIntoTheUnshardedRun(t *testing.T) {
	t.Parallel()
	setProcessEnv(t, "RUNNER_BIN", runnerBin(t))
	sys := mustAbs(t, "../../examples/reference/system.yaml")
	dir := t.TempDir()
	at := func(name string) string { return filepath.Join(dir, name) }
	explore := func(out string, extra ...string) (int, string, string) {
		args := []string{"explore", "--system", sys, "--out", at(out), "--json", at(out + ".json"), "--parallel", "2",
			"--only", `^relay producer_db\.commit\(table=outbox\) nth=1 do=(kill|error)$`}
		return cli(t, append(args, extra...)...)
	}
	if code, out, errs := explore("map", "--map-only"); code != exitOK || !strings.Contains(out, "map: 2 point(s) to run") {
		t.Fatalf("--map-only: exit %d, want 0 numbering 2 points\n%s\n%s", code, out, errs)
	}
	pin := []string{"--map", at("map/explore-map.json")}
	if code, out, errs := explore("whole", pin...); code != exitOK {
		t.Fatalf("unsharded: exit %d\n%s\n%s", code, out, errs)
	}
	var wg sync.WaitGroup
	codes, outs := make([]int, 2), make([]string, 2)
	for k := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[k], outs[k], _ = explore("shard"+string(rune('1'+k)), append(pin, "--shard", string(rune('1'+k))+"/2")...)
		}()
	}
	wg.Wait()
	if codes[0] != exitOK || codes[1] != exitOK {
		t.Fatalf("the shards: exit %v\n%s\n%s", codes, outs[0], outs[1])
	}
	code, out, errs := cli(t, "explore", "merge", "--out", at("merged"), "--json", at("merged.json"), "--markdown", at("merged.md"), at("shard1"), at("shard2"))
	if code != exitOK || !strings.Contains(out, "explored 2 point(s)") {
		t.Fatalf("merge: exit %d, want 0 with the 2 points\n%s\n%s", code, out, errs)
	}
	norm := func(file, out string) string {
		return strings.ReplaceAll(shardTimings.ReplaceAllString(mustRead(t, file), `"seconds": 0`), at(out), "OUT")
	}
	if got, want := norm(at("merged.json"), "merged"), norm(at("whole.json"), "whole"); got != want {
		t.Errorf("the merged JSON report is not the unsharded one's:\n%s\nwant:\n%s", got, want)
	}
	if s1 := mustRead(t, at("shard1.json")); !strings.Contains(s1, `"index": 1`) || !strings.Contains(s1, `"of": 2`) {
		t.Errorf("shard 1's JSON report does not say which shard it is:\n%s", s1)
	}
	refusals(t, sys, at)
}

// refusals: a shard missing, a shard of another workload, a --map of
// another workload (all exit 2).
func refusals(t *testing.T, sys string, at func(string) string) {
	code, _, errs := cli(t, "explore", "merge", "--out", at("merged1"), at("shard1"))
	if code != exitInvalid || !strings.Contains(errs, "shard 2/2 is missing") {
		t.Errorf("a merge without shard 2: exit %d, want 2 saying so\n%s", code, errs)
	}
	other := scenarioFile(t, "other.yaml", "name: one event\nsystem: "+sys+"\nsteps:\n  - produce: {event: ev-1}\n  - start: relay\n  - expect: {outbox.unpublished: 0, within: 10s}\n  - start: consumer\n")
	if code, out, errs := cli(t, "explore", other, "--out", at("other"), "--only", "^$", "--shard", "2/2"); code != exitOK {
		t.Fatalf("a shard of another workload: exit %d\n%s\n%s", code, out, errs)
	}
	code, _, errs = cli(t, "explore", "merge", "--out", at("merged2"), at("shard1"), at("other"))
	if code != exitInvalid || !strings.Contains(errs, "ran another system file or workload") {
		t.Errorf("a merge with another workload's shard: exit %d, want 2 saying so\n%s", code, errs)
	}
	code, _, errs = cli(t, "explore", other, "--out", at("other2"), "--map", at("map/explore-map.json"), "--shard", "1/2")
	if code != exitInvalid || !strings.Contains(errs, "maps another system file or workload") {
		t.Errorf("--map of another workload: exit %d, want 2 saying so\n%s", code, errs)
	}
}

// TestExploreShardsCIExample keeps examples/ci/explore-shards.yml honest:
// valid YAML, a map job, an 8-way matrix of shards on its map, a merge job,
// each with flags the runner really has.
func TestExploreShardsCIExample(t *testing.T) {
	b, err := os.ReadFile("../../examples/ci/explore-shards.yml")
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		Jobs map[string]struct {
			Strategy struct{ Matrix struct{ Shard []int } }
			Steps    []struct{ Run string }
		}
	}
	if err := yaml.Unmarshal(b, &wf); err != nil {
		t.Fatalf("not YAML: %v", err)
	}
	runs := func(job string) string {
		var all []string
		for _, st := range wf.Jobs[job].Steps {
			all = append(all, st.Run)
		}
		return strings.Join(all, "\n")
	}
	for job, flags := range map[string][]string{
		"map":     {"explore ", "--map-only", "--out found"},
		"explore": {"explore ", "--shard ${{ matrix.shard }}/8", "--map map/explore-map.json", "--out found"},
		"merge":   {"explore merge", "--out found", "--json", "--markdown", "--junit", "--html-dir", "shards/*"},
	} {
		for _, flag := range flags {
			if !strings.Contains(runs(job), flag) {
				t.Errorf("the %s job's run steps lack %q:\n%s", job, flag, runs(job))
			}
		}
	}
	if got := wf.Jobs["explore"].Strategy.Matrix.Shard; len(got) != 8 {
		t.Errorf("the matrix: %v, want 8 shards", got)
	}
	for cmd, flags := range map[string][]string{"explore": {"-shard K/N", "-map FILE", "-map-only"}, "explore merge": {"-out DIR", "-html-dir DIR", "-junit FILE"}} {
		args := append(strings.Fields(cmd), "--help")
		code, out, _ := run0(args...)
		for _, flag := range flags {
			if code != exitOK || !strings.Contains(out, flag) {
				t.Errorf("runner %s --help: exit %d, lacks %s:\n%s", cmd, code, flag, out)
			}
		}
	}
}
