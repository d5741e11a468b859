package world

import (
	"fmt"
	"math"
	"testing"

	"github.com/outboxdrill/runner/broker"
)

// broker.MaxQueueConsumerID leaves room for the scenario key that prefixes a
// RabbitMQ queue name: the longest key acquire can make fits it.
func TestScenarioKeyFitsConsumerIDBudget(t *testing.T) {
	key := fmt.Sprintf("%s:%s:%d", namePrefix, newRunID(), math.MaxInt)
	if len(key) > broker.ScenarioKeyMaxLen {
		t.Fatalf("scenario key %q is %d bytes; broker.ScenarioKeyMaxLen is %d", key, len(key), broker.ScenarioKeyMaxLen)
	}
	if q := key + "." + string(make([]byte, broker.MaxQueueConsumerID)); len(q) > 255 {
		t.Fatalf("longest RabbitMQ queue name is %d bytes, over AMQP's 255", len(q))
	}
}
