package soak

import (
	"fmt"
	"github.com/outboxdrill/runner/broker"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/scenario"
)

// withSteps are the steps of a schedule a --with may add parameters to.
var withSteps = []string{"produce", "relay", "publish", "consume", "claim"}

// parseWith reads each spec, a step in the scenario language's shorthand
// (consume(dedupe=entry_id)), with the language's own loader: every step
// of that name the schedule writes gets those parameters, so a soak can
// drill an anti-pattern (and find it). All problems are said at once.
func parseWith(specs []string) (map[string][]param, error) {
	out := map[string][]param{}
	var problems []string
	for _, spec := range specs {
		src := "name: with\nsteps:\n  - " + scalar(spec) + "\n"
		scs, errs := scenario.Parse("--with", []byte(src), broker.Kinds())
		if len(errs) > 0 {
			for _, e := range errs {
				problems = append(problems, fmt.Sprintf("--with %s: %s", scalar(spec), e.Msg))
			}
			continue
		}
		call := scs[0].Steps[0]
		if !slices.Contains(withSteps, call.Def.Name) {
			problems = append(problems, fmt.Sprintf("--with %s: a schedule has no %s step; it writes %s", scalar(spec), call.Def.Name, strings.Join(withSteps, ", ")))
			continue
		}
		for _, a := range call.Args {
			v, err := withValue(a.Value)
			if err != nil {
				problems = append(problems, fmt.Sprintf("--with %s: %s: %v", scalar(spec), a.Key, err))
				continue
			}
			out[call.Def.Name] = setParam(out[call.Def.Name], param{a.Key, v})
		}
	}
	if len(problems) > 0 {
		return nil, &WithError{problems}
	}
	return out, nil
}

// WithError is a --with the scenario language refuses, or one whose
// parameters do not go with a fault the schedule drew: a usage error.
type WithError struct{ Problems []string }

func (e *WithError) Error() string { return strings.Join(e.Problems, "\n") }

// withValue is a --with parameter's value as a scenario writes it: a bare
// flag is true, a string that would read back as another type is quoted.
func withValue(n *yaml.Node) (string, error) {
	switch {
	case n.ShortTag() == "!!null":
		return "true", nil
	case n.Kind != yaml.ScalarNode:
		return "", fmt.Errorf("a %s: --with takes single values only", map[yaml.Kind]string{yaml.MappingNode: "map", yaml.SequenceNode: "list"}[n.Kind])
	case n.ShortTag() != "!!str":
		return n.Value, nil
	}
	var back yaml.Node
	if plain().MatchString(n.Value) && yaml.Unmarshal([]byte(n.Value), &back) == nil &&
		len(back.Content) == 1 && back.Content[0].ShortTag() == "!!str" {
		return n.Value, nil
	}
	return scalar(n.Value), nil
}
