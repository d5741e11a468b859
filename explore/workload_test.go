package explore

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The built-in workload's re-sends wait for the consumer group to have
// nothing left to hand out where the broker counts it: a consumer killed
// before it applied ev-2 gets it back only after its claim's idle time,
// and a forged copy delivered first was applied by the correct Go payments
// consumer (phantom). RabbitMQ and Kafka give a dead consumer's messages
// back in their place: no wait there.
func TestBuiltinResendsWaitForTheGroupWhereTheBrokerCountsIt(t *testing.T) {
	for b, wait := range map[string]bool{"redis": true, "nats": true, "rabbitmq": false, "kafka": false} {
		out := t.TempDir()
		if _, errs := Default(context.Background(), loadSystem(t), out, b); len(errs) > 0 {
			t.Fatal(errs)
		}
		body, err := os.ReadFile(filepath.Join(out, "workload.builtin"))
		if err != nil {
			t.Fatal(err)
		}
		at, resend := strings.Index(string(body), "stream.lag: 0"), strings.Index(string(body), "publish: {event: ev-1}")
		if got := at >= 0 && at < resend; got != wait || resend < 0 {
			t.Errorf("%s: a wait on stream.lag before the re-sends: %v, want %v\n%s", b, got, wait, body)
		}
	}
}
