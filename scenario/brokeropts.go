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

// brokerKeyCache holds brokerTopKeys: every key of every file looks them up.
// Kinds are only ever added, so their count tells a stale cache.
var brokerKeyCache struct {
	sync.Mutex
	kinds int
	keys  []*topKey
}

// brokerTopKeys are the keys of the registered kinds with options, read
// at call time (a test may register a kind).
func brokerTopKeys() []*topKey {
	kinds := broker.Kinds()
	brokerKeyCache.Lock()
	defer brokerKeyCache.Unlock()
	if brokerKeyCache.kinds != len(kinds) {
		brokerKeyCache.keys = nil
		for _, k := range kinds {
			if k.Options != nil {
				brokerKeyCache.keys = append(brokerKeyCache.keys, brokerTopKey(k))
			}
		}
		brokerKeyCache.kinds = len(kinds)
	}
	return brokerKeyCache.keys
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

// defaultBrokerOptions are every kind's options as a scenario without its
// key has them.
func defaultBrokerOptions() map[string]any {
	out := map[string]any{}
	for _, k := range broker.Kinds() {
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
