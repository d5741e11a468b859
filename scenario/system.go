package scenario

import (
	"path/filepath"
	"slices"
	"strings"

	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/steps"
	"github.com/outboxdrill/runner/system"
)

// The system: key points at a team's system file: the scenario then drills
// the team's own services (start/stop/kill steps) instead of the reference
// pipeline's steps alone.
func init() {
	defineTopKey(&topKey{Name: "system",
		Doc: "a team's system file (path relative to this file): its services, schema and table mappings; " +
			"`start`, `stop` and `kill` run its services behind fault proxies (see [Drill your own service](drill-your-own-service.md)). " +
			"`runner run --system FILE` applies one to every scenario without this key",
		parse: func(file string, kv steps.Arg, h *header, errs *diag.Errors) {
			p := scalarString(file, kv, errs)
			if p == "" {
				return
			}
			if !filepath.IsAbs(p) {
				p = filepath.Join(filepath.Dir(file), p)
			}
			sys, serrs := system.Load(p)
			if len(serrs) > 0 {
				*errs = append(*errs, diag.Errorf(diag.NodePos(file, kv.Value), "system: %s has errors:", p))
				*errs = append(*errs, serrs...)
				return
			}
			h.System, h.SystemPos = sys, diag.NodePos(file, kv.Value)
		},
		schema: func() map[string]any {
			return map[string]any{"type": "string", "minLength": 1, "description": "a team's system file, relative to the scenario file"}
		}})
}

// serviceSteps are the steps that run a system file's services.
var serviceSteps = []string{"kill", "start", "stop"}

// UseSystem gives sc the system file sys unless it names its own, and
// checks that every service its steps name is in the system file.
func (sc *Scenario) UseSystem(sys *system.System) diag.Errors {
	if sc.System == nil && sys != nil {
		sc.System, sc.SystemPos = sys, diag.Pos{File: sys.File, Line: 1, Col: 1}
	}
	return sc.checkServices()
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
		case sc.System.Services[n] == nil:
			errs = append(errs, diag.Errorf(c.Pos, "%s: no service %q in %s%s; services: %s", c.Def.Name, n, sc.System.File,
				diag.Suggest(n, sc.System.Names()), strings.Join(sc.System.Names(), ", ")))
		}
	}
	return errs
}
