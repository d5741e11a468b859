package scenario

import (
	"fmt"
	"slices"
	"strings"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/steps"
	"gopkg.in/yaml.v3"
)

// broker: pins a scenario to one broker. A file runner explore wrote names
// the broker its faults were found on (XADD is Redis's, a Produce Kafka's):
// `runner run FILE` alone must run it there, not on the default Redis.
func brokerKey() *topKey {
	return &topKey{Name: "broker",
		doc: func() string {
			return "the broker the scenario is pinned to (one of " + strings.Join(broker.Names(), ", ") + "): `runner run` without `--broker` runs it there; " +
				"a run on other brokers (`--broker all`, or another one) skips it there, saying so. Without it, the scenario runs on the run's brokers (default redis). " +
				"`runner explore` writes it into every file it writes"
		},
		parse: func(file string, kv steps.Arg, h *header, errs *diag.Errors) {
			b := scalarString(file, kv, errs)
			names := kindNames(h.kinds)
			switch {
			case b == "":
			case !slices.Contains(names, b):
				*errs = append(*errs, diag.Errorf(diag.NodePos(file, kv.Value), "broker: unknown broker %q%s; one of: %s", b, diag.Suggest(b, names), strings.Join(names, ", ")))
			default:
				h.Pinned, h.PinnedPos = b, diag.NodePos(file, kv.Value)
			}
		},
		schema: func() map[string]any {
			return map[string]any{"type": "string", "enum": broker.Names(), "description": "the broker the scenario is pinned to: runner run without --broker runs it there, other brokers skip it"}
		}}
}

// notJudgedKey is the not_judged: key.
func notJudgedKey() *topKey {
	return &topKey{Name: "not_judged",
		Doc: "history invariants this scenario does not judge, e.g. `[double_published]`: a violation of one of them neither fails nor passes the scenario, " +
			"and the run reports it not judged, by the scenario's own word (never \"no violation\"). For a window the history cannot tell apart " +
			"(a pipelining relay's retry after an error at its XADD looks like a double publish); `runner explore` writes it where it could not judge. " +
			"An invariant may not be both here and in `expect_violations`",
		parse: func(file string, kv steps.Arg, h *header, errs *diag.Errors) {
			h.NotJudged, h.NotJudgedPos = notJudgedList(file, kv, errs), diag.NodePos(file, kv.Value)
		},
		schema: func() map[string]any {
			return map[string]any{"type": "array", "uniqueItems": true, "items": map[string]any{"type": "string", "enum": history.InvariantNames()},
				"description": "history invariants the scenario does not judge: reported not judged, by the scenario's own word"}
		}}
}

// notJudgedList reads not_judged: a list of invariant names, each once.
func notJudgedList(file string, kv steps.Arg, errs *diag.Errors) []string {
	names := history.InvariantNames()
	n := kv.Value
	if n.Kind != yaml.SequenceNode {
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "not_judged: want a list of invariants, e.g. [double_published]; one of: %s", strings.Join(names, ", ")))
		return nil
	}
	var out []string
	for _, v := range n.Content {
		_, known := history.Invariants[v.Value]
		switch {
		case v.Kind != yaml.ScalarNode || !known:
			*errs = append(*errs, diag.Errorf(diag.NodePos(file, v), "not_judged: unknown invariant %s%s; one of: %s", diag.Describe(v), diag.Suggest(v.Value, names), strings.Join(names, ", ")))
		case slices.Contains(out, v.Value):
			*errs = append(*errs, diag.Errorf(diag.NodePos(file, v), "not_judged: %s given twice", v.Value))
		default:
			out = append(out, v.Value)
		}
	}
	return out
}

// checkNotJudged: an invariant declared to occur (expect_violations) and
// not to be judged at once could never be met.
func (sc *Scenario) checkNotJudged() diag.Errors {
	var errs diag.Errors
	for b, list := range sc.ExpectViolations {
		for _, inv := range list {
			if slices.Contains(sc.NotJudged, inv) {
				errs = append(errs, diag.Errorf(sc.NotJudgedPos, "not_judged: %s is also in expect_violations (%s): a violation not judged can never be seen; keep one", inv, b))
			}
		}
	}
	return errs
}

// PinnedSkip is why a run on broker b skips the scenario ("" when it
// runs there): it is pinned to another broker.
func (sc *Scenario) PinnedSkip(b string) string {
	if sc.Pinned == "" || sc.Pinned == b {
		return ""
	}
	return fmt.Sprintf("%s: pinned to %s (broker: %s), not run on %s: `runner run` without --broker runs it on %s", sc.PinnedPos, sc.Pinned, sc.Pinned, b, sc.Pinned)
}
