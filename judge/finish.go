package judge

import (
	"cmp"
	"errors"
	"fmt"

	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/steps"
	"github.com/outboxdrill/runner/sysrun"
)

// Finish judges, once a team's system settled, the faults the scenario
// armed (one that never struck fails it; one that could not be classified
// exactly skips it: that is known only once it met the wire) and the
// entries the services published: an XADD without a field the system
// file's stream mapping names fails the scenario, saying so. It returns
// what the broker proxies relayed, decoded once here for the whole
// verdict (System reads it); nil on the reference pipeline or when the
// scenario was skipped.
func Finish(run *sysrun.Run, res *report.Result) *sysrun.Wire {
	if run == nil {
		return nil
	}
	if res.Skipped == "" && res.Passed() {
		var skip *steps.SkipError
		switch err := run.Unstruck(); {
		case errors.As(err, &skip):
			res.Skipped = fmt.Sprintf("%s: %s", res.Scenario.SystemPos, skip.Reason)
		case err != nil:
			res.Failures = append(res.Failures, steps.Failure{Pos: startPos(res.Scenario), Key: "fault", Msg: err.Error()})
		}
	}
	if res.Skipped != "" {
		return nil
	}
	wire := run.Wire()
	for _, err := range wire.FieldProblems() {
		res.Failures = append(res.Failures, steps.Failure{Pos: res.Scenario.Pos, Key: fieldsKey, Msg: err.Error()})
	}
	return wire
}

// fieldsKey is the failure of an entry without a field the stream mapping
// names.
const fieldsKey = "stream"

// FieldsMismatch reports whether the services published entries the
// stream mapping cannot read: a history read through it would blame the
// consumer (an event id "" acked without effect) for the mapping's fault.
func FieldsMismatch(res *report.Result) bool {
	for _, f := range res.Failures {
		if f.Key == fieldsKey && f.Pos == res.Scenario.Pos {
			return true
		}
	}
	return false
}

// ServicesSaid is what each process of the team's services wrote, the
// killed ones too, labelled by the start step that started it: shown with
// a failure, and with -v for a passing scenario.
func ServicesSaid(run *sysrun.Run) []report.ServiceOutput {
	if run == nil {
		return nil
	}
	var out []report.ServiceOutput
	for _, o := range run.Outputs() {
		out = append(out, report.ServiceOutput{Service: o.Service, Start: o.Start.String(), Fault: o.Fault, PID: o.PID, Ended: o.Ended, Output: o.Text})
	}
	return out
}

// startPos is where the scenario's first fault was armed.
func startPos(sc *scenario.Scenario) diag.Pos {
	for _, c := range sc.Steps {
		if c.Def.Name == "start" && c.ParamValues()["fault"] != nil {
			return c.Pos
		}
	}
	return sc.SystemPos
}

// consumerOf is the scenario's ${consumer}: what its services are told
// they read as, the consume step's default unless its vars say otherwise.
func consumerOf(sc *scenario.Scenario) string {
	return cmp.Or(sc.Vars["consumer"], steps.DefaultConsumer)
}
