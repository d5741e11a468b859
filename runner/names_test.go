package runner

import (
	"fmt"
	"math"
	"testing"

	"github.com/outboxdrill/runner/steps"
)

// steps.MaxConsumerIDLen leaves room for the scenario key that prefixes a
// RabbitMQ queue name: the longest key acquire can make fits it.
func TestScenarioKeyFitsConsumerIDBudget(t *testing.T) {
	key := fmt.Sprintf("%s:%s:%d", namePrefix, newRunID(), math.MaxInt)
	if len(key) > steps.ScenarioKeyMaxLen {
		t.Fatalf("scenario key %q is %d bytes; steps.ScenarioKeyMaxLen is %d", key, len(key), steps.ScenarioKeyMaxLen)
	}
	if q := key + "." + string(make([]byte, steps.MaxConsumerIDLen)); len(q) > 255 {
		t.Fatalf("longest RabbitMQ queue name is %d bytes, over AMQP's 255", len(q))
	}
}
