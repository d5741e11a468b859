package system

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/proxy/fault"
)

// A service's ready: says when a start may go on. A line of its output
// (log:) is what a service that prints one says; one that prints none is
// ready once its proxies saw it cross a boundary (on:, a fault's grammar):
//
//	consumer: {run: [./consumer], ready: {on: broker.request(XREADGROUP)}}
//
// With both, both must have happened; timeout bounds the wait for them.

// readReady reads ready: {log, on, timeout} into svc. on: is loaded as a
// fault's on: is (fault.Watch, against ds: every broker proxy's dialect),
// each problem said at on:; one that only the file's brokers can judge (an
// operation of no dialect as written) is checkReady's, once they are
// known.
func readReady(file string, n *yaml.Node, svc *Service, ds []fault.Dialect, errs *diag.Errors) {
	before := len(*errs)
	r := fields(file, diag.Pair{Key: "ready", KeyPos: diag.NodePos(file, n), Value: n}, []string{"log", "on", "timeout"}, nil, errs)
	if len(*errs) == before && r["log"] == nil && r["on"] == nil {
		// Without either there is nothing to wait for, and a timeout would
		// bound nothing.
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "ready: want log: TEXT (a line of the service's output), on: BOUNDARY (its first crossing of a fault's boundary, e.g. broker.request(deliver)) or both"))
	}
	svc.Ready = text(file, r["log"], errs)
	svc.ReadyTimeout = duration(file, "ready: timeout", r["timeout"], errs)
	on := r["on"]
	if on == nil {
		return
	}
	svc.ReadyOnPos = diag.NodePos(file, on)
	text := scalar(file, "ready: on", on, errs)
	if text == "" {
		return
	}
	f, probs := fault.Watch(text, ds)
	for _, p := range probs {
		if un := (*fault.UnsuitedError)(nil); !errors.As(p.Err, &un) {
			*errs = append(*errs, diag.Errorf(svc.ReadyOnPos, "ready: %v", p))
			f = nil
		}
	}
	svc.ReadyOn = f
}

// hasReady reports whether svc (a variant) gives a ready of its own, which
// replaces the service's whole.
func (svc *Service) hasReady() bool { return svc.Ready != "" || svc.ReadyOn != nil }

// withVariants is svc, then its variants by broker name.
func (svc *Service) withVariants() []*Service {
	out := []*Service{svc}
	for _, b := range slices.Sorted(maps.Keys(svc.Variants)) {
		out = append(out, svc.Variants[b])
	}
	return out
}

// checkReady: a broker boundary a service waits for must be one its
// proxy counts on the brokers the service runs on. With brokers: listed,
// on each of them (the service's variant's ready there, if it has one): a
// service that could never be known ready there would fail every start.
// Without, on one of them at least; a run on a broker whose proxy does
// not take it skips the scenario (runner's gate), as for a fault.
func (s *System) checkReady(errs *diag.Errors) {
	for name, svc := range s.asWritten() {
		if s.Brokers == nil {
			for _, v := range svc.withVariants() {
				if f := v.ReadyOn; f != nil && f.Unsuited() != nil {
					*errs = append(*errs, diag.Errorf(v.ReadyOnPos, "services: %s: ready: on: %v", name, f.Unsuited()))
				}
			}
			continue
		}
		*errs = append(*errs, s.readyNowhere(name, svc)...)
	}
}

// readyNowhere are the problems of svc's broker ready: {on: …} on the
// file's brokers: one of no broker (a typo) said once, with each broker's
// reason; one of another broker said on each listed broker that cannot
// count it, with the way out.
func (s *System) readyNowhere(name string, svc *Service) diag.Errors {
	var errs diag.Errors
	typos := map[*fault.Fault][]string{}
	var at []*Service // the service (or variant) each typo is written in
	for _, b := range s.Brokers {
		on := svc.On(b)
		why := ReadySkip(on, b)
		switch {
		case why == "":
		case on.ReadyOn.Unsuited() != nil:
			if typos[on.ReadyOn] == nil {
				at = append(at, on)
			}
			c, _ := on.ReadyOn.For(b)
			typos[on.ReadyOn] = append(typos[on.ReadyOn], fmt.Sprintf("%s: %v", b, c.Skip))
		default:
			errs = append(errs, diag.Errorf(on.ReadyOnPos, "services: %s: ready: on: %s (the file lists %s among its brokers: give the service a variant for it with a ready of its own)", name, why, b))
		}
	}
	for _, on := range at {
		errs = append(errs, diag.Errorf(on.ReadyOnPos, "services: %s: ready: on: %s is an operation of none of the file's brokers: %s", name, on.ReadyOn.On(), strings.Join(typos[on.ReadyOn], "; ")))
	}
	return errs
}

// ReadySkip is why svc's ready: {on: …} cannot be awaited on broker b, ""
// when it can (or names a database boundary, or none): b has no protocol
// proxy, or its proxy does not take the boundary as written.
func ReadySkip(svc *Service, b string) string {
	f := svc.ReadyOn
	if f == nil || f.Link.Database() {
		return ""
	}
	c, ok := f.For(b)
	switch {
	case !ok:
		return fmt.Sprintf("%s needs a %s protocol proxy; the runner has none for it", f.On(), b)
	case c.Skip != nil:
		return fmt.Sprintf("%s does not apply on %s: %v", f.On(), b, c.Skip)
	}
	return ""
}

// readyTables checks the table of each service's ready: {on: …} against
// the catalog, as a fault's: a table the schema lacks is never written,
// so the service would never be ready.
func (k *checker) readyTables() diag.Errors {
	var errs diag.Errors
	for name, svc := range k.s.asWritten() {
		for _, v := range svc.withVariants() {
			if v.ReadyOn == nil {
				continue
			}
			if err := k.c.CheckFault(v.ReadyOn.Trigger); err != nil {
				errs = append(errs, diag.Errorf(v.ReadyOnPos, "services: %s: ready: on: %v", name, err))
			}
		}
	}
	return errs
}
