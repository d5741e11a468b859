package system

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/diag"
)

// A service with replicas: N runs as N processes, NAME-1 … NAME-N, each a
// service of its own (its own proxies, output label and history), made of
// the same run, env and ready; ${replica} tells each its number. A start,
// stop or kill step that names NAME acts on every replica; one that names
// NAME-2 on that one. A fault names one process, so it names one replica.

// readReplicas reads replicas: a whole number from 1; 0 when n is absent.
func readReplicas(file string, n *yaml.Node, svc *Service, errs *diag.Errors) {
	if n == nil {
		return
	}
	svc.ReplicasPos = diag.NodePos(file, n)
	v, err := strconv.Atoi(strings.TrimSpace(n.Value))
	if n.Kind != yaml.ScalarNode || err != nil || v < 1 || v > MaxReplicas {
		*errs = append(*errs, diag.Errorf(svc.ReplicasPos, "services: %s: replicas: want a whole number from 1 to %d (how many processes of it run side by side), got %s", svc.Name, MaxReplicas, diag.Describe(n)))
		return
	}
	svc.Replicas = v
}

// MaxReplicas bounds replicas: each replica is a process with three proxies
// of its own, on the machine that runs the drill.
const MaxReplicas = 16

// expandReplicas replaces each service with replicas: N > 1 by its N
// replicas, NAME-1 … NAME-N, and records them in Groups. A replica's name
// that another service of the file already has is an error at replicas:.
func (s *System) expandReplicas(errs *diag.Errors) {
	for _, name := range s.Names() {
		svc := s.Services[name]
		if svc.Replicas <= 1 {
			continue
		}
		var names []string
		for i := 1; i <= svc.Replicas; i++ {
			names = append(names, fmt.Sprintf("%s-%d", name, i))
		}
		for _, n := range names {
			if other := s.Services[n]; other != nil {
				*errs = append(*errs, diag.Errorf(svc.ReplicasPos, "services: %s: replicas: %d names its replicas %s, but %s is another service of the file (at %s): rename one of them",
					name, svc.Replicas, strings.Join(names, ", "), n, other.Pos))
				return
			}
		}
		delete(s.Services, name)
		for i, n := range names {
			r := *svc
			r.Name, r.Group, r.Replica = n, name, i+1
			s.Services[n] = &r
		}
		if s.Groups == nil {
			s.Groups = map[string][]string{}
		}
		s.Groups[name] = names
	}
}

// Resolve is the services a step naming name acts on: a replicated
// service's replicas, in order, or the service itself; nil when the file
// has no such name.
func (s *System) Resolve(name string) []string {
	if g, ok := s.Groups[name]; ok {
		return slices.Clone(g)
	}
	if s.Services[name] != nil {
		return []string{name}
	}
	return nil
}

// StepNames are the names a start, stop or kill step may give: every
// service, every replica and every replicated service, sorted.
func (s *System) StepNames() []string {
	names := s.Names()
	for g := range s.Groups {
		names = append(names, g)
	}
	slices.Sort(names)
	return names
}

// FaultTarget is the error of a fault armed on name, "" when name is one
// process: a replicated service is several, and a fault strikes one.
func (s *System) FaultTarget(name string) string {
	g, ok := s.Groups[name]
	if !ok {
		return ""
	}
	return fmt.Sprintf("%s has %d replicas: arm the fault on one of them: %s", name, len(g), strings.Join(g, ", "))
}
