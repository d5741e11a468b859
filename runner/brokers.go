package runner

import (
	"fmt"
	"slices"
	"strings"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/scenario"
)

// ParseBrokers reads --broker: a name, a comma-separated list, or "all".
// An empty value is an error: it would otherwise mean the default, Redis,
// and hide a variable that expanded to nothing (--broker "$BROKERS").
func ParseBrokers(s string) ([]string, error) {
	names := broker.Names()
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("--broker: empty; want %s, all, or a list such as %s", strings.Join(names, ", "), BrokerExample())
	}
	if s == "all" {
		return names, nil
	}
	var out []string
	for _, b := range strings.Split(s, ",") {
		b = strings.TrimSpace(b)
		switch {
		case b == "":
			return nil, fmt.Errorf("--broker %q: an empty name in the list; want a list such as %s", s, BrokerExample())
		case b == "all":
			return nil, fmt.Errorf("--broker %q: all stands alone (it is every broker); or list them: %s", s, strings.Join(names, ","))
		}
		if !slices.Contains(names, b) {
			return nil, fmt.Errorf("--broker: unknown broker %q%s; one of: %s, or all", b, diag.Suggest(b, names), strings.Join(names, ", "))
		}
		if !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	return out, nil
}

// BrokerChoices are --broker's values as help shows them:
// redis|nats|rabbitmq|kafka|all.
func BrokerChoices() string { return strings.Join(append(broker.Names(), "all"), "|") }

// BrokerExample is a --broker list as help shows one: redis,nats.
func BrokerExample() string {
	names := broker.Names()
	return strings.Join(names[:min(2, len(names))], ",")
}

// AllGiven reports whether every server of the run is given by URL, none
// the runner's own (what --keep needs: its own servers go when it exits).
func AllGiven(p *Params) bool {
	for _, b := range p.brokers() {
		if p.URLs[b] == "" {
			return false
		}
	}
	return p.PGURL != ""
}

// lacking is the skip reason of a scenario whose steps need what broker b
// lacks, each with the broker's documented reason, or "".
func lacking(sc *scenario.Scenario, b string, caps broker.Capabilities) string {
	var miss, why []string
	for _, c := range sc.Needs(b) {
		if !caps.Has(c) {
			miss = append(miss, string(c))
			if w := broker.WhyNot(b, c); w != "" {
				why = append(why, w)
			}
		}
	}
	if len(miss) == 0 {
		return ""
	}
	s := fmt.Sprintf("needs %s, which %s does not have", strings.Join(miss, ", "), b)
	if len(why) > 0 {
		s += ": " + strings.Join(why, "; ")
	}
	return s
}
