package world

import (
	"context"
	"encoding/binary"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/kafka/kafkaserver"
)

// ownServer is a broker connection whose server is the runner's own
// (the rest of broker.Conn is not used here).
type ownServer struct {
	broker.Conn
	srv broker.Process
}

func (o ownServer) Server() (broker.Process, string) { return o.srv, "" }

// H4: the runner's own kfake panicking (on a request kfake cannot parse,
// here an API key it does not know) is named as its crash, with kfake's
// stack: the run makes it an *InternalError (the CLI: the panic file,
// exit 4), not the "connection refused" its scenarios saw.
func TestKfakeCrashIsNamed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k, err := kafkaserver.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Discard(ctx)
	w := &World{conns: map[string]broker.Conn{"kafka": ownServer{srv: k}}, brokerLabels: map[string]string{"kafka": "kafka (kfake)"}}
	if what, _ := w.BrokerCrash("kafka"); what != "" {
		t.Fatalf("a crash before any: %v", what)
	}
	c, err := net.Dial("tcp", k.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(append(binary.BigEndian.AppendUint32(nil, 10), 0x03, 0xe7, 0, 0, 0, 0, 0, 1, 0xff, 0xff)) // ApiKey 999
	var what string
	var stack []byte
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if what, stack = w.BrokerCrash("kafka"); what != "" {
			break
		}
	}
	if what == "" {
		t.Fatal("kfake's panic was not named")
	}
	if !strings.HasPrefix(what, "kafka (kfake) crashed: panic: ") || !strings.Contains(string(stack), "goroutine ") {
		t.Errorf("value %q, stack %q", what, stack)
	}
}
