package jetstream

import (
	"maps"
	"testing"

	"github.com/outboxdrill/runner/broker"
)

// The kind answers a scenario's capabilities before its stream exists
// (the runner's gate skips on them), as the stream its options make does.
func TestKindCapabilitiesAgreeWithTheStream(t *testing.T) {
	for _, o := range []*ScenarioOptions{nil, {MsgID: false}, {MsgID: true}} {
		sc := broker.Scenario{DeliveryLimit: 3}
		if o != nil {
			sc.Options = o
		}
		s := &Stream{opt: options(sc)}
		if got, want := Kind.Capabilities(sc), s.Capabilities(); !maps.Equal(got, want) {
			t.Errorf("options %+v: the kind says %v, the stream %v", o, got, want)
		}
	}
	if !Kind.Capabilities(broker.Scenario{Options: &ScenarioOptions{MsgID: true}}).Has(broker.BrokerDedupe) {
		t.Error("msg_id: no broker dedupe")
	}
}
