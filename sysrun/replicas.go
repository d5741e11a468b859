package sysrun

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// group is the replicas a step naming name acts on, ok when name is a
// service with replicas (system.System.Groups).
func (r *Run) group(name string) ([]string, bool) {
	names, ok := r.cfg.System.Groups[name]
	return names, ok
}

// oneProcess refuses a fault on a replicated service: a fault strikes one
// process (the loader says so first, at the step: scenario's
// checkFaultTargets; this is a Run driven without it).
func (r *Run) oneProcess(name string) error {
	if why := r.cfg.System.FaultTarget(name); why != "" {
		return errors.New(why)
	}
	return nil
}

// each runs do for every name in turn, until one fails; the details are
// joined.
func each(names []string, do func(string) (string, error)) (string, error) {
	var details []string
	for _, n := range names {
		d, err := do(n)
		if d != "" {
			details = append(details, d)
		}
		if err != nil {
			return strings.Join(details, "; "), fmt.Errorf("%s: %w", n, err)
		}
	}
	return strings.Join(details, "; "), nil
}

// running are those of names with a process of the run (a replica that a
// fault killed or that exited by itself may be gone already); all of
// names when none is, for the error of each.
func (r *Run) running(names []string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, n := range names {
		if r.svcs[n] != nil {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return names
	}
	return out
}

// stopAll stops the running replicas at once: each has its own grace
// after SIGTERM, and one after the other would add them up.
func (r *Run) stopAll(ctx context.Context, names []string) (string, error) {
	names = r.running(names)
	details, errs := make([]string, len(names)), make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			details[i], errs[i] = r.Stop(ctx, n)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("%s: %w", n, errs[i])
			}
		}()
	}
	wg.Wait()
	return strings.Join(details, "; "), errors.Join(errs...)
}
