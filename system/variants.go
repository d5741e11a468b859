package system

import (
	"iter"
	"maps"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/diag"
)

// A team that moves to another broker rewrites its relay and consumer;
// both builds are drilled from one system file. A service's variants:
// name, per broker, what differs there:
//
//	relay:
//	  run: [node, relay.js]
//	  env: {DATABASE_URL: "${producer_db.url}", REDIS_URL: "${broker.url}"}
//	  variants:
//	    kafka: {run: [node, kafka-relay.js], env: {BROKERS: "${broker.address}"}}
//
// On a broker with a variant, its run replaces the service's, its env is
// added over the service's (a key of both takes the variant's value) and
// its ready replaces the service's; elsewhere the service runs as written.

// readVariants reads a service's variants: into svc, one per broker of
// kinds.
func readVariants(file string, n *yaml.Node, svc *Service, kinds []*broker.Kind, errs *diag.Errors) {
	brokers := kindNames(kinds)
	if n.Kind != yaml.MappingNode || len(n.Content) == 0 {
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "services: %s: variants: want a map broker → {run: [...], env: {...}, ready: {log: ...}}, e.g. {kafka: {run: [node, kafka-relay.js]}}, got %s", svc.Name, diag.Describe(n)))
		return
	}
	svc.Variants = map[string]*Service{}
	for _, kv := range diag.Pairs(file, n, errs) {
		if !slices.Contains(brokers, kv.Key) {
			*errs = append(*errs, diag.Errorf(kv.KeyPos, "services: %s: variants: unknown broker %q%s; brokers: %s", svc.Name, kv.Key, diag.Suggest(kv.Key, brokers), strings.Join(brokers, ", ")))
			continue
		}
		v := &Service{Name: svc.Name, Pos: kv.KeyPos, Env: map[string]string{}, EnvPos: map[string]diag.Pos{}}
		readServiceFields(file, diag.Pair{Key: svc.Name + ": variants: " + kv.Key, KeyPos: kv.KeyPos, Value: kv.Value}, v, nil, kinds, errs)
		svc.Variants[kv.Key] = v
	}
}

// asWritten yields each service as the file writes it: a replicated one
// once, by the name the file gives it (its first replica standing for all),
// so that what is wrong with it is said once.
func (s *System) asWritten() iter.Seq2[string, *Service] {
	return func(yield func(string, *Service) bool) {
		for _, name := range s.Names() {
			svc := s.Services[name]
			if svc.Group != "" {
				if svc.Replica > 1 {
					continue
				}
				name = svc.Group
			}
			if !yield(name, svc) {
				return
			}
		}
	}
}

// checkVariants: a variant is for a broker the file's brokers: list
// names, and a service without run of its own has a variant with run on
// every broker it may run on.
func (s *System) checkVariants(errs *diag.Errors) {
	for name, svc := range s.asWritten() {
		for _, b := range slices.Sorted(maps.Keys(svc.Variants)) {
			if s.Brokers != nil && !slices.Contains(s.Brokers, b) {
				*errs = append(*errs, diag.Errorf(svc.Variants[b].Pos, "services: %s: variants: %s is not among the file's brokers (%s): add it there, or drop the variant", name, b, strings.Join(s.Brokers, ", ")))
			}
		}
		if svc.Run != nil {
			continue
		}
		var bare []string
		for _, b := range s.brokersOrAll() {
			if v := svc.Variants[b]; v == nil || v.Run == nil {
				bare = append(bare, b)
			}
		}
		if len(bare) > 0 {
			*errs = append(*errs, diag.Errorf(svc.Pos, "services: %s: missing run: it runs on %s without a variant that gives one (give the service a run:, or list its brokers: and a variant with run: for each)", name, strings.Join(bare, ", ")))
		}
	}
}

func (s *System) brokersOrAll() []string {
	if s.Brokers != nil {
		return s.Brokers
	}
	return s.kindNames()
}

// kindNames are the names of the kinds the file was read against.
func (s *System) kindNames() []string { return kindNames(s.Kinds) }

func kindNames(kinds []*broker.Kind) []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = k.Name
	}
	return out
}

// On is the system as it runs on broker b: each service with its
// variant for b applied (and no variants left). s itself is unchanged.
func (s *System) On(b string) *System {
	out := *s
	out.Services = make(map[string]*Service, len(s.Services))
	for name, svc := range s.Services {
		out.Services[name] = svc.On(b)
	}
	return &out
}

// On is svc as it runs on broker b: its variant for b applied.
func (svc *Service) On(b string) *Service {
	out := *svc
	out.Variants = nil
	v := svc.Variants[b]
	if v == nil {
		return &out
	}
	if v.Run != nil {
		out.Run, out.RunPos = v.Run, v.RunPos
	}
	out.Env, out.EnvPos = maps.Clone(svc.Env), maps.Clone(svc.EnvPos)
	maps.Copy(out.Env, v.Env)
	maps.Copy(out.EnvPos, v.EnvPos)
	if v.hasReady() {
		out.Ready, out.ReadyOn, out.ReadyOnPos, out.ReadyTimeout = v.Ready, v.ReadyOn, v.ReadyOnPos, v.ReadyTimeout
	}
	return &out
}
