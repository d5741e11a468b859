package scenario

import (
	"maps"
	"slices"
	"strings"

	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/steps"
	"github.com/outboxdrill/runner/system"
)

// CheckPlaceholders checks the ${…} of every service the scenario starts,
// as that start gives them: each must be a variable of the scenario, a key
// of the start's env, or a placeholder that means something on every
// broker of brokers (nil: on some broker; the run's broker is told later).
// A problem is reported where the system file writes the ${…}, with the
// closest name when it looks misspelt; identical ones once.
func (sc *Scenario) CheckPlaceholders(brokers []string) diag.Errors {
	if sc.System == nil {
		return nil
	}
	var errs diag.Errors
	seen := map[string]bool{}
	for _, c := range sc.Steps {
		p, ok := c.Params.(*steps.StartParams)
		if !ok {
			continue
		}
		for _, name := range sc.System.Resolve(p.Service) { // none: checkServices reports a service the file lacks
			errs = append(errs, sc.checkStart(sc.System.Services[name], p, brokers, seen)...)
		}
	}
	return errs
}

// checkStart checks the ${…} of svc as start step p gives them, on
// brokers; an error said before (seen) is not said again.
func (sc *Scenario) checkStart(svc *system.Service, p *steps.StartParams, brokers []string, seen map[string]bool) diag.Errors {
	var errs diag.Errors
	check := func(svc *system.Service, brokers []string) {
		for _, r := range svc.Refs() {
			if e := sc.checkRef(r, p.Env, brokers); e != nil && !seen[e.Error()] {
				seen[e.Error()] = true
				errs = append(errs, e)
			}
		}
	}
	if brokers == nil {
		// Every variant's words, on a broker told later.
		check(svc, nil)
		for _, b := range slices.Sorted(maps.Keys(svc.Variants)) {
			check(svc.Variants[b], nil)
		}
	}
	for _, b := range brokers {
		check(svc.On(b), []string{b})
	}
	return errs
}

// checkRef is the problem of one ${…} as a start with env gives it, or nil.
func (sc *Scenario) checkRef(r system.Ref, env map[string]string, brokers []string) *diag.Error {
	if _, ok := sc.Vars[r.Name]; ok {
		return nil
	}
	if _, ok := env[r.Name]; ok {
		return nil
	}
	if system.IsPlaceholder(r.Name) {
		for _, b := range brokers {
			if !system.Means(sc.System.Kinds, r.Name, b) {
				return diag.Errorf(r.Pos, "services: %s: %s: %s (list the brokers the services support, brokers: [...], to have a run on another skip them)", r.Service, r.Where, system.Meaningless(sc.System.Kinds, r.Name, b))
			}
		}
		return nil
	}
	known := slices.Concat(system.Placeholders, slices.Sorted(maps.Keys(sc.Vars)), slices.Sorted(maps.Keys(env)))
	// Said the same for every scenario that starts the service: the
	// caller prints it once.
	return diag.Errorf(r.Pos, "services: %s: %s: unknown ${%s}%s: not a placeholder, and a scenario starts %s without a variable (vars:) or start env: of that name; placeholders: %s",
		r.Service, r.Where, r.Name, diag.Suggest(r.Name, known), r.Service, strings.Join(system.Placeholders, ", "))
}
