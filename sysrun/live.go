package sysrun

import (
	"slices"
	"strings"
)

// Live is a service process still running, with what it uses: whether it
// ever connected to the producer's database (it may still publish the
// outbox) and the consumer groups it read as on the broker (it may still
// take their pending entries).
type Live struct {
	Name     string
	Producer bool
	Groups   []string
	// Seen: the runner sees its broker traffic (a protocol proxy); false
	// where the service talks to the broker directly, so its groups are
	// unknown.
	Seen bool
}

// Live lists the services still running, by name.
func (r *Run) Live() []Live {
	r.mu.Lock()
	svcs := make([]*service, 0, len(r.svcs))
	for _, s := range r.svcs {
		svcs = append(svcs, s)
	}
	r.mu.Unlock()
	var out []Live
	for _, s := range svcs {
		s.mu.Lock()
		proc := s.proc
		s.mu.Unlock()
		if proc == nil {
			continue
		}
		if exited, _ := proc.Exited(); exited {
			continue
		}
		l := Live{Name: s.name, Producer: s.pg[0] != nil && s.pg[0].Connections() > 0, Seen: s.redis != nil}
		if s.redis != nil {
			l.Groups = readGroups(s)
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b Live) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// readGroups are the groups the service's broker connections named in
// XREADGROUP, XCLAIM or XAUTOCLAIM.
func readGroups(s *service) []string {
	var gs []string
	for _, e := range s.redis.Events() {
		if len(e.Command) < 4 {
			continue
		}
		g := ""
		switch strings.ToUpper(e.Command[0]) {
		case "XREADGROUP":
			if strings.EqualFold(e.Command[1], "GROUP") {
				g = e.Command[2]
			}
		case "XCLAIM", "XAUTOCLAIM":
			g = e.Command[2]
		}
		if g != "" && !slices.Contains(gs, g) {
			gs = append(gs, g)
		}
	}
	slices.Sort(gs)
	return gs
}

// LiveReaders are the live services reading as group, and whether any live
// service's broker traffic is unseen (then a reader may hide there).
func LiveReaders(live []Live, group string) (names []string, unseen bool) {
	for _, l := range live {
		if !l.Seen {
			unseen = true
		}
		if slices.Contains(l.Groups, group) {
			names = append(names, l.Name)
		}
	}
	return names, unseen
}
