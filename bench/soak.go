package bench

import (
	"context"
	"fmt"
	"slices"

	"github.com/outboxdrill/runner/soak"
)

// soakFigures are p.Repeat soak runs (the one engine: generated schedules
// of steps through the runner, judged by the history checker), each next
// to its raw baseline and to the same soak through the proxies, measured
// back to back so that each ratio compares runs that saw the same machine
// load.
type soakFigures struct {
	soak, raw, proxied []float64 // events/s per run
	// clean is the same soak without faults (events/s), work what the
	// faults made the faulted soak do (Report.Work).
	clean, work []float64
	violations  int // over every run
}

func measureSoak(ctx context.Context, p Params) (soakFigures, error) {
	var f soakFigures
	base := soak.Params{Events: p.SoakEvents, Faults: 0.1, Seed: 1, Workers: 2, PGURL: p.PGURL, Redis: p.Redis, ConnectTimeout: p.ConnectTimeout}
	for range p.Repeat {
		direct := base
		direct.Baseline = true
		rep, err := soak.Soak(ctx, direct)
		if err != nil {
			return f, err
		}
		clean := base
		clean.Faults = 0
		cl, err := soak.Soak(ctx, clean)
		if err != nil {
			return f, err
		}
		viaProxies := base
		viaProxies.ViaProxies = true
		prox, err := soak.Soak(ctx, viaProxies)
		if err != nil {
			return f, err
		}
		f.soak, f.raw, f.proxied = append(f.soak, rep.EventsPerSec()), append(f.raw, rep.RawPerSec), append(f.proxied, prox.EventsPerSec())
		f.clean, f.work = append(f.clean, cl.EventsPerSec()), append(f.work, 100*(rep.Work()-1))
		f.violations += len(rep.Violations) + len(prox.Violations) + len(cl.Violations)
	}
	return f, nil
}

// ratios are a[i]/b[i] in percent, for min/median/max.
func ratios(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = 100 * a[i] / b[i]
	}
	return out
}

// spread is "min / median / max" of xs, each formatted by format.
func spread(xs []float64, format string) string {
	c := slices.Clone(xs)
	slices.Sort(c)
	f := func(x float64) string { return fmt.Sprintf(format, x) }
	return f(c[0]) + " / " + f(c[len(c)/2]) + " / " + f(c[len(c)-1])
}

func benchSoak(ctx context.Context, p Params, row func(what, figure, note string)) error {
	if p.SoakEvents <= 0 {
		return nil
	}
	f, err := measureSoak(ctx, p)
	if err != nil {
		return err
	}
	verdict := "no violation"
	if f.violations > 0 {
		verdict = fmt.Sprintf("%d VIOLATIONS", f.violations)
	}
	runs := fmt.Sprintf("min / median / max of %d runs", p.Repeat)
	row(fmt.Sprintf("soak %d events, faults 0.1, --parallel 2", p.SoakEvents), spread(f.soak, "%.0f")+" events/s", runs+"; "+verdict)
	row("raw baseline, same servers", spread(f.raw, "%.0f")+" events/s", runs+"; each run just before its soak")
	row("soak/raw", spread(ratios(f.soak, f.raw), "%.0f%%"), runs+": each soak against its own baseline")
	row("work the faults added", spread(f.work, "+%.0f%%"), runs+": produces done again, entries published again, deliveries again, over the raw baseline's work for as many events")
	row("the same soak without faults / raw", spread(ratios(f.clean, f.raw), "%.0f%%"), runs+": what the engine costs (the runner's steps, their records, the history judgement), each against the baseline of its run")
	row("same soak through the protocol proxies", spread(f.proxied, "%.0f")+" events/s", runs+"; "+verdict)
	row("proxied/direct", spread(ratios(f.proxied, f.soak), "%.0f%%"), runs+": each against the direct soak just before it")
	return nil
}
