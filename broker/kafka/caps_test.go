package kafka

import (
	stdmaps "maps"
	"testing"

	"github.com/outboxdrill/runner/broker"
)

// The kind answers a scenario's capabilities before its topic exists (the
// runner's gate skips on them), as the topic its options make does (its
// groups share groups or classic ones, as Conn.New sets them).
func TestKindCapabilitiesAgreeWithTheTopic(t *testing.T) {
	for _, o := range []*ScenarioOptions{nil, {Partitions: 1}, {Partitions: 2, Share: true}} {
		sc, opt := broker.Scenario{}, Options{}
		if o != nil {
			sc.Options, opt.Partitions, opt.Share = o, o.Partitions, o.Share
		}
		if got, want := Kind.Capabilities(sc), (&Topic{opt: opt}).Capabilities(); !stdmaps.Equal(got, want) {
			t.Errorf("options %+v: the kind says %v, the topic %v", o, got, want)
		}
	}
	if !Kind.Capabilities(broker.Scenario{Options: &ScenarioOptions{Share: true}}).Has(broker.DeliveryCount) {
		t.Error("share: no delivery count")
	}
}
