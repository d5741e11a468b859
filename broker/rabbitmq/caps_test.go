package rabbitmq

import (
	"maps"
	"testing"

	"github.com/outboxdrill/runner/broker"
)

// The kind answers a scenario's capabilities before its queues exist (the
// runner's gate skips on them), as the broker does.
func TestKindCapabilitiesAgreeWithTheBroker(t *testing.T) {
	if got, want := Kind.Capabilities(broker.Scenario{Consumers: []string{"a"}, DeliveryLimit: 2}), (&Broker{}).Capabilities(); !maps.Equal(got, want) {
		t.Errorf("the kind says %v, the broker %v", got, want)
	}
}
