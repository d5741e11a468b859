package redisstream

import (
	"maps"
	"testing"

	"github.com/outboxdrill/runner/broker"
)

// The kind answers a scenario's capabilities before its stream exists
// (the runner's gate skips on them), as the stream does.
func TestKindCapabilitiesAgreeWithTheStream(t *testing.T) {
	if got, want := Kind.Capabilities(broker.Scenario{Consumers: []string{"a"}}), (&Stream{}).Capabilities(); !maps.Equal(got, want) {
		t.Errorf("the kind says %v, the stream %v", got, want)
	}
}
