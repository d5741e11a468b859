package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"github.com/outboxdrill/runner/explore"
	"github.com/outboxdrill/runner/internal/safe"
	"github.com/outboxdrill/runner/internal/version"
	"github.com/outboxdrill/runner/runner"
)

// shardFlags are explore's flags for a CI matrix: --shard, --map,
// --map-only (docs/explore.md, "Large systems").
func shardFlags(fs *flag.FlagSet, f *exploreFlags) {
	fs.StringVar(&f.shard, "shard", "", "run only the K-th of N deterministic shards of the points (`K/N`); each writes OUT/explore-shard-K-of-N.json for `runner explore merge`")
	fs.StringVar(&f.mapFile, "map", "", "number the points as `FILE` (OUT/"+explore.MapFile+" of a --map-only run, or a shard's record) does, not as this run's fault-free run does: every shard then splits one numbering")
	fs.BoolVar(&f.p.MapOnly, "map-only", false, "run the fault-free run, number the points and write them to OUT/"+explore.MapFile+" (for the shards' --map); run no point")
}

// checkShardFlags reads --shard; what does not go together is said
// ("" when all is well).
func checkShardFlags(f *exploreFlags) string {
	if f.shard != "" {
		s, err := runner.ParseShard(f.shard)
		if err != nil {
			return err.Error()
		}
		f.p.Shard = s
	}
	switch {
	case f.random && (f.shard != "" || f.mapFile != "" || f.p.MapOnly):
		return "--shard, --map and --map-only split the systematic points; --random is one run"
	case f.p.MapOnly && (f.shard != "" || f.mapFile != ""):
		return "--map-only writes the map the shards' --map reads: give it neither --shard nor --map"
	}
	return ""
}

// pinMap reads --map and checks it maps w on this build and broker;
// false when it does not (said on stderr).
func pinMap(ctx context.Context, f *exploreFlags, w *explore.Workload, stderr io.Writer) bool {
	if f.mapFile == "" {
		return true
	}
	rec, err := explore.ReadRecord(ctx, f.mapFile)
	why := ""
	if err == nil {
		why, err = rec.CheckMap(ctx, w, version.String(), f.p.Runner.Brokers[0])
	}
	if err != nil {
		why = err.Error()
	}
	if why != "" {
		fmt.Fprintf(stderr, "runner %s: --map %s: %s\n", f.cmd, safe.Line(f.mapFile), safe.Line(why))
		return false
	}
	f.p.Map = rec
	return true
}

// shardOutputs says which shard res is (its reports, its finding files)
// and writes its record for the merge, when the run ended as it should
// (runErr nil): an interrupted shard leaves none, and the merge says it
// is missing.
func shardOutputs(ctx context.Context, res *explore.Result, f *exploreFlags, runErr error) error {
	if runErr != nil || ctx.Err() != nil || f.p.Shard.Of == 0 && !f.p.MapOnly {
		return nil
	}
	if err := res.Identify(ctx, f.p); err != nil {
		return err
	}
	if err := res.MarkFindings(); err != nil {
		return err
	}
	rec := explore.RecordOf(res, f.p.Out)
	if err := rec.Write(f.p.Out); err != nil {
		return err
	}
	if f.p.MapOnly { // a map is no shard: its reports say nothing of one
		res.Shard = nil
		fmt.Fprintf(f.p.Log, "map: %d point(s) to run, numbered in %s: give it to each shard's --map\n", rec.ToRun(), safe.Line(filepath.Join(f.p.Out, explore.MapFile)))
	}
	return nil
}
