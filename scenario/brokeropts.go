package scenario

import (
	"strings"
	"sync"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/steps"
)

// A broker kind with options (broker.Kind.Options) has a top-level key of
// its own, named after it (nats:, kafka:). Its struct's tags are a step's
// parameter tags: steps decodes, documents and schemas them, so this file
// names no broker and no option.

// brokerKeyCache holds each kind's key: every key of every file looks them
// up.
var brokerKeyCache struct {
	sync.Mutex
	keys map[*broker.Kind]*topKey
}

// brokerTopKeys are the keys of those of kinds with options, in order.
func brokerTopKeys(kinds []*broker.Kind) []*topKey {
	brokerKeyCache.Lock()
	defer brokerKeyCache.Unlock()
	if brokerKeyCache.keys == nil {
		brokerKeyCache.keys = map[*broker.Kind]*topKey{}
	}
	var out []*topKey
	for _, k := range kinds {
		if k.Options == nil {
			continue
		}
		if brokerKeyCache.keys[k] == nil {
			brokerKeyCache.keys[k] = brokerTopKey(k)
		}
		out = append(out, brokerKeyCache.keys[k])
	}
	return out
}

func brokerTopKey(k *broker.Kind) *topKey {
	return &topKey{Name: k.Name, Doc: optionsReference(k),
		parse: func(file string, kv steps.Arg, h *header, errs *diag.Errors) {
			v, e := steps.DecodeOptions(file, k.Name, k.Options, kv.Value)
			*errs = append(*errs, e...)
			h.BrokerOptions[k.Name] = v
			h.brokerKeys[k.Name] = true
		},
		schema: func() map[string]any { return steps.OptionsSchema(k.Options, k.OptionsDoc) },
	}
}

// optionsReference is a broker key's line in the reference: what it
// tunes, then each option with its type and default.
func optionsReference(k *broker.Kind) string {
	var parts []string
	for _, p := range steps.OptionsParams(k.Options) {
		def := ""
		if p.Default != "" {
			def = ", default `" + p.Default + "`"
		}
		parts = append(parts, "`"+p.Name+"` ("+p.Type()+def+"): "+p.Doc)
	}
	return k.OptionsDoc + ": " + strings.Join(parts, "; ")
}

// defaultBrokerOptions are the options of every one of kinds as a scenario
// without its key has them.
func defaultBrokerOptions(kinds []*broker.Kind) map[string]any {
	out := map[string]any{}
	for _, k := range kinds {
		if k.Options != nil {
			out[k.Name] = steps.DefaultOptions(k.Options)
		}
	}
	return out
}

// Tuned reports whether the scenario runs broker b otherwise than by its
// defaults: it writes b's own key or broker_dlq.
func (sc *Scenario) Tuned(b string) bool { return sc.brokerKeys[b] || sc.BrokerDLQ > 0 }

// Broker is what the scenario asks of broker b: its consumer ids, b's
// options and the broker's own dead-lettering.
func (sc *Scenario) Broker(b string) broker.Scenario {
	return broker.Scenario{Consumers: sc.Consumers(), Options: sc.BrokerOptions[b], DeliveryLimit: sc.BrokerDLQ}
}
