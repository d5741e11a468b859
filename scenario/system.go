package scenario

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/steps"
	"github.com/outboxdrill/runner/system"
)

// The system: key points at a team's system file: the scenario then drills
// the team's own services (start/stop/kill steps) instead of the reference
// pipeline's steps alone.
func systemKey() *topKey {
	return &topKey{Name: "system",
		Doc: "a team's system file (path relative to this file): its services, schema and table mappings; " +
			"`start`, `stop` and `kill` run its services behind fault proxies (see [Drill your own service](drill-your-own-service.md)). " +
			"`runner run --system FILE` applies one to every scenario, over this key (the run says so for each scenario whose own file it replaced)",
		parse: func(file string, kv steps.Arg, h *header, errs *diag.Errors) {
			p := scalarString(file, kv, errs)
			if p == "" {
				return
			}
			if !filepath.IsAbs(p) {
				p = filepath.Join(filepath.Dir(file), p)
			}
			sys, serrs, err := system.Load(h.ctx, p, h.kinds)
			h.systemFailed = err != nil || len(serrs) > 0
			if err != nil {
				*errs = append(*errs, diag.Errorf(diag.NodePos(file, kv.Value), "system: %v", err))
				return
			}
			if len(serrs) > 0 {
				*errs = append(*errs, diag.Errorf(diag.NodePos(file, kv.Value), "system: %s has errors:", p))
				*errs = append(*errs, serrs...)
				return
			}
			h.System, h.SystemPos = sys, diag.NodePos(file, kv.Value)
		},
		schema: func() map[string]any {
			return map[string]any{"type": "string", "minLength": 1, "description": "a team's system file, relative to the scenario file"}
		}}
}

// MinSettle and MaxSettle bound settle: a system is quiet only after
// 300 ms without a change, and one that needs minutes is not settling.
const (
	MinSettle = 500 * time.Millisecond
	MaxSettle = 10 * time.Minute
)

// settleKey is the settle: key.
func settleKey() *topKey {
	return &topKey{Name: "settle",
		Doc: "how long a team's system may take, after the last step, to settle before it is judged (a duration, default the run's `--settle`, 5s): " +
			"every started service keeps running until the outbox is drained, every committed event is applied by each consumer id a running consumer reads as, and the inbox and read model stop moving; " +
			"then the state is read in one snapshot per database. The limit is raised to outlast the timers the services announced to the broker (a Kafka group's session timeout, a JetStream consumer's AckWait), and by the time the services waited for a CPU on a machine busier than its cores. " +
			"What a running system still owes at the limit is judged stuck; a system whose state still moves then fails, naming what moved, and is not judged",
		parse: func(file string, kv steps.Arg, h *header, errs *diag.Errors) {
			v := scalarString(file, kv, errs)
			if v == "" {
				return
			}
			d, err := time.ParseDuration(v)
			switch {
			case err != nil:
				*errs = append(*errs, diag.Errorf(diag.NodePos(file, kv.Value), "settle: want a duration such as 5s or 500ms, got %q", v))
			case d < MinSettle || d > MaxSettle:
				*errs = append(*errs, diag.Errorf(diag.NodePos(file, kv.Value), "settle: want a duration from %s to %s, got %s", MinSettle, MaxSettle, v))
			default:
				h.Settle = d
			}
		},
		schema: func() map[string]any {
			return map[string]any{"type": "string", "pattern": `^[0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h)([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))*$`, "description": "how long a team's system may take to settle after the last step before it is judged (default 5s)"}
		}}
}

// serviceSteps are the steps that run a system file's services.
var serviceSteps = []string{"kill", "start", "stop"}

// UseSystem gives sc the system file sys (--system: every scenario, over
// its own system: key, which SystemOverridden then names), and checks that
// every service its steps name is in the system file and that every ${…}
// those services are given has a value (the broker's own are checked when
// the run's broker is known: CheckPlaceholders).
func (sc *Scenario) UseSystem(sys *system.System) diag.Errors {
	if sys != nil && sc.System != sys {
		if sc.System != nil && canonical(sc.System.File) != canonical(sys.File) {
			sc.SystemOverridden = sc.System.File
		}
		sc.System, sc.SystemPos = sys, diag.Pos{File: sys.File, Line: 1, Col: 1}
	}
	if sc.System == nil && sc.systemFailed {
		return nil // its system file's own errors said what is wrong
	}
	return append(append(sc.checkServices(), sc.checkBrokerFaults()...), sc.CheckPlaceholders(nil)...)
}

// checkBrokerFaults: a broker fault a step arms must apply on one of the
// brokers the system file says its services speak (brokers:), as that
// broker's proxy reads it. One written for another broker (XACK on a
// RabbitMQ-only system) would only ever be skipped: nothing would be
// drilled, so it is an error, with each broker's reason in its own words.
// Without brokers: (every broker), one no broker's proxy takes is.
func (sc *Scenario) checkBrokerFaults() diag.Errors {
	var errs diag.Errors
	for _, st := range sc.brokerTriggers() {
		if e := sc.appliesNowhere(st); e != nil {
			errs = append(errs, e)
		}
	}
	return errs
}

// appliesNowhere is checkBrokerFaults' problem with st, or nil: each
// broker's reason is its compiled skip (a broker without a proxy takes
// every fault: it is judged when it runs).
func (sc *Scenario) appliesNowhere(st steps.StepTrigger) *diag.Error {
	if sc.System == nil || len(sc.System.Brokers) == 0 {
		if un := st.Unsuited(); un != nil {
			return diag.Errorf(st.Pos, "on: %v", un)
		}
		return nil
	}
	var why []string
	for _, b := range sc.System.Brokers {
		c, ok := st.For(b)
		if !ok || c.Skip == nil {
			return nil
		}
		why = append(why, fmt.Sprintf("%s: %v", b, c.Skip))
	}
	return diag.Errorf(st.Pos, "%s applies on none of the brokers %s speaks (brokers: %s): %s",
		st.Trigger.On(), sc.System.File, strings.Join(sc.System.Brokers, ", "), strings.Join(why, "; "))
}

// brokerTriggers are the broker faults the scenario's steps arm.
func (sc *Scenario) brokerTriggers() []steps.StepTrigger {
	var out []steps.StepTrigger
	for _, c := range sc.Steps {
		for _, st := range steps.Triggers(c) {
			if st.Trigger.Link == fault.Broker {
				out = append(out, st)
			}
		}
	}
	return out
}

// CheckTriggersOn checks every broker fault of the scenario against
// broker b, as a run on b would arm it: one b's proxy does not take is an
// error naming b, where run would skip the scenario there (validate
// --broker); so is a ready: {on: …} of a service a start step starts
// that b's proxy cannot count (ReadySkip). A system file that does not support b skips it anyway, and
// a fault that applies nowhere is checkBrokerFaults' to say, once.
func (sc *Scenario) CheckTriggersOn(b string) diag.Errors {
	if (sc.System != nil && sc.System.Unsupported(b) != "") || sc.PinnedSkip(b) != "" {
		return nil
	}
	var errs diag.Errors
	for _, st := range sc.brokerTriggers() {
		if sc.appliesNowhere(st) != nil {
			continue
		}
		if c, ok := st.For(b); ok && c.Skip != nil {
			errs = append(errs, diag.Errorf(st.Pos, "%s does not apply on %s (a run there skips the scenario): %v", st.Trigger.On(), b, c.Skip))
		}
	}
	if at, why := sc.ReadySkip(b); why != "" {
		errs = append(errs, diag.Errorf(at, "%s (a run on %s skips the scenario)", why, b))
	}
	return errs
}

// ReadySkip is why a service a start step of sc starts could never be
// known ready on broker b (its ready: {on: …}, its variant's for b if it
// has one, names a boundary b's proxy does not take), at its ready's on:;
// "" when each can.
func (sc *Scenario) ReadySkip(b string) (diag.Pos, string) {
	if sc.System == nil {
		return diag.Pos{}, ""
	}
	for _, c := range sc.Steps {
		if _, ok := c.Params.(*steps.StartParams); !ok {
			continue
		}
		n, _ := c.ParamValues()["service"].(string)
		for _, name := range sc.System.Resolve(n) {
			svc := sc.System.Services[name].On(b)
			if why := system.ReadySkip(svc, b); why != "" {
				return svc.ReadyOnPos, fmt.Sprintf("service %s's ready: %s", name, why)
			}
		}
	}
	return diag.Pos{}, ""
}

// checkServices: a step that runs a service needs a system file naming it.
func (sc *Scenario) checkServices() diag.Errors {
	var errs diag.Errors
	for _, c := range sc.Steps {
		if !slices.Contains(serviceSteps, c.Def.Name) {
			continue
		}
		name := c.ParamValues()["service"]
		n, _ := name.(string)
		switch {
		case sc.System == nil:
			errs = append(errs, diag.Errorf(c.Pos, "%s runs a service of a team's system: give the scenario a system file (system: path) or run it with --system FILE", c.Def.Name))
		case sc.System.Resolve(n) == nil:
			errs = append(errs, diag.Errorf(c.Pos, "%s: no service %q in %s%s; services: %s", c.Def.Name, n, sc.System.File,
				diag.Suggest(n, sc.System.StepNames()), strings.Join(sc.System.StepNames(), ", ")))
		}
	}
	return append(errs, sc.checkFaultTargets()...)
}

// checkFaultTargets: a fault strikes one process, so a step that arms one
// (start's fault, also, then; the fault step) on a service with replicas
// names one replica (relay-1), not the service (relay).
func (sc *Scenario) checkFaultTargets() diag.Errors {
	if sc.System == nil {
		return nil
	}
	var errs diag.Errors
	for _, c := range sc.Steps {
		ts := steps.Triggers(c)
		if len(ts) == 0 {
			continue
		}
		n, _ := c.ParamValues()["service"].(string)
		if why := sc.System.FaultTarget(n); why != "" {
			errs = append(errs, diag.Errorf(ts[0].Pos, "%s: %s", c.Def.Name, why))
		}
	}
	return errs
}
