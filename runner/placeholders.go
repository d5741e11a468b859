package runner

import (
	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/steps"
	"github.com/outboxdrill/runner/system"
	"github.com/outboxdrill/runner/world"
)

// CheckPlaceholders is what validate checks of run's placeholderProblems:
// those of the scenarios on brokers, and, for a system file alone (sys,
// no scenario), of each of its services as if a scenario started it.
func CheckPlaceholders(scs []*scenario.Scenario, sys *system.System, brokers []string) error {
	if len(scs) == 0 && sys != nil {
		alone := &scenario.Scenario{System: sys}
		for _, name := range sys.Names() {
			alone.Steps = append(alone.Steps, &steps.Call{Params: &steps.StartParams{ServiceParams: steps.ServiceParams{Service: name}}})
		}
		scs = []*scenario.Scenario{alone}
	}
	return placeholderProblems(scs, brokers)
}

// placeholderProblems checks, before anything runs, every ${…} the
// services of each scenario's system file are given on each broker of the
// run that the file supports: one that names nothing there is an error
// naming the broker (scenario.CheckPlaceholders).
func placeholderProblems(scs []*scenario.Scenario, brokers []string) error {
	var errs diag.Errors
	seen := map[string]bool{}
	for _, sc := range scs {
		if sc.System == nil {
			continue
		}
		for _, b := range brokers {
			if sc.System.Unsupported(b) != "" || sc.PinnedSkip(b) != "" {
				continue // skipped there, with the reason
			}
			for _, e := range sc.CheckPlaceholders([]string{b}) {
				if !seen[e.Error()] {
					seen[e.Error()] = true
					errs = append(errs, e)
				}
			}
		}
	}
	if len(errs) == 0 {
		return nil
	}
	errs.Sort()
	return &world.InvalidError{Errs: errs}
}

// CheckTriggers is validate's check of every broker fault against each
// broker it is asked for: brokers (--broker), or, when those were not
// given, the brokers a scenario's system file lists (else brokers). A
// fault one of them does not take is an error naming that broker, in its
// words; run would skip the scenario there (scenario.CheckTriggersOn).
func CheckTriggers(scs []*scenario.Scenario, brokers []string, given bool) diag.Errors {
	var errs diag.Errors
	for _, sc := range scs {
		on := brokers
		if !given && sc.System != nil && len(sc.System.Brokers) > 0 {
			on = sc.System.Brokers
		}
		for _, b := range on {
			errs = append(errs, sc.CheckTriggersOn(b)...)
		}
	}
	return errs
}

// PlaceholderProblems is what Run checks before it starts anything: every
// ${…} a service of scs is given must mean something on each of brokers
// (an *InvalidError, nil when all do). runner explore checks its workload
// with it before its first run, as `runner run` would.
func PlaceholderProblems(scs []*scenario.Scenario, brokers []string) error {
	return placeholderProblems(scs, brokers)
}
