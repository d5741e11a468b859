package nats

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nats-io/nats.go/jetstream"
)

// Replies nats-server 2.9.10 sent, as they crossed the wire: to the Node
// client (nats 2.29.3: jsm.consumers.add, consumers.get) and to nats.go
// 1.56 (a push consumer with AckNone and no AckWait, a consumer info that
// found none).
var consumerReplies = []struct {
	name, reply string
	want        Consumer
	ok          bool
}{
	{"node: create, ack_policy none", `{"type":"io.nats.jetstream.api.v1.consumer_create_response","stream_name":"NODEEXPL","name":"nodenone","created":"2026-12-06T06:00:12.474830485Z","config":{"durable_name":"nodenone","name":"nodenone","deliver_policy":"all","ack_policy":"none","ack_wait":2000000000,"max_deliver":-1,"replay_policy":"instant","max_waiting":512,"num_replicas":0},"delivered":{"consumer_seq":0,"stream_seq":0},"ack_floor":{"consumer_seq":0,"stream_seq":0},"num_ack_pending":0,"num_redelivered":0,"num_waiting":0,"num_pending":1}`,
		Consumer{Stream: "NODEEXPL", Name: "nodenone", AckPolicy: "none", AckWait: 2 * time.Second, From: "create"}, true},
	{"node: create, explicit", `{"type":"io.nats.jetstream.api.v1.consumer_create_response","stream_name":"NODEEXPL","name":"nodeexplicit","created":"2026-12-06T06:00:12.476693591Z","config":{"durable_name":"nodeexplicit","name":"nodeexplicit","deliver_policy":"all","ack_policy":"explicit","ack_wait":2000000000,"max_deliver":-1,"replay_policy":"instant","max_waiting":512,"max_ack_pending":1000,"num_replicas":0},"delivered":{"consumer_seq":0,"stream_seq":0},"ack_floor":{"consumer_seq":0,"stream_seq":0},"num_ack_pending":0,"num_redelivered":0,"num_waiting":0,"num_pending":1}`,
		Consumer{Stream: "NODEEXPL", Name: "nodeexplicit", AckPolicy: "explicit", AckWait: 2 * time.Second, From: "create"}, true},
	{"node: info", `{"type":"io.nats.jetstream.api.v1.consumer_info_response","stream_name":"NODEEXPL","name":"nodenone","created":"2026-12-06T06:00:12.474830485Z","config":{"durable_name":"nodenone","name":"nodenone","deliver_policy":"all","ack_policy":"none","ack_wait":2000000000,"max_deliver":-1,"replay_policy":"instant","max_waiting":512,"num_replicas":0},"delivered":{"consumer_seq":0,"stream_seq":0},"ack_floor":{"consumer_seq":0,"stream_seq":0},"num_ack_pending":0,"num_redelivered":0,"num_waiting":0,"num_pending":1}`,
		Consumer{Stream: "NODEEXPL", Name: "nodenone", AckPolicy: "none", AckWait: 2 * time.Second, From: "info"}, true},
	{"nats.go: push AckNone, no ack_wait", `{"type":"io.nats.jetstream.api.v1.consumer_create_response","stream_name":"EXPL_1796536657347588413","name":"pushnone","created":"2026-12-06T05:57:37.553484701Z","config":{"durable_name":"pushnone","name":"pushnone","deliver_policy":"all","ack_policy":"none","max_deliver":-1,"filter_subject":"EXPL_1796536657347588413.\u003e","replay_policy":"instant","deliver_subject":"_INBOX.6RNVUZKXfQycvcVvHmnNrP","num_replicas":0},"delivered":{"consumer_seq":0,"stream_seq":0},"ack_floor":{"consumer_seq":0,"stream_seq":0},"num_ack_pending":0,"num_redelivered":0,"num_waiting":0,"num_pending":1}`,
		Consumer{Stream: "EXPL_1796536657347588413", Name: "pushnone", AckPolicy: "none", From: "create"}, true},
	{"nats.go: info, not found", `{"type":"io.nats.jetstream.api.v1.consumer_info_response","error":{"code":404,"err_code":10014,"description":"consumer not found"}}`, Consumer{}, false},
	{"node: account info", `{"type":"io.nats.jetstream.api.v1.account_info_response","memory":0,"storage":42,"streams":1,"consumers":0,"limits":{"max_memory":-1,"max_storage":-1,"max_streams":-1,"max_consumers":-1,"max_ack_pending":-1,"memory_max_stream_bytes":-1,"storage_max_stream_bytes":-1,"max_bytes_required":false},"api":{"total":8,"errors":1}}`, Consumer{}, false},
	{"not JSON", `+OK`, Consumer{}, false},
}

func TestParseConsumerReply(t *testing.T) {
	for _, c := range consumerReplies {
		got, ok := parseConsumerReply([]byte(c.reply))
		if ok != c.ok || got != c.want {
			t.Errorf("%s: got %+v %v, want %+v %v", c.name, got, ok, c.want, c.ok)
		}
	}
	for _, s := range []string{"$JS.API.CONSUMER.CREATE.S.d", "$JS.API.CONSUMER.CREATE.S.d.S.>", "$JS.API.CONSUMER.DURABLE.CREATE.S.d", "$JS.API.CONSUMER.INFO.S.d"} {
		if !consumerAPI(s) {
			t.Errorf("%s: not taken for a consumer API request", s)
		}
	}
	for _, s := range []string{"$JS.API.CONSUMER.MSG.NEXT.S.d", "$JS.API.CONSUMER.DELETE.S.d", "$JS.API.STREAM.INFO.S", "orders.created"} {
		if consumerAPI(s) {
			t.Errorf("%s: taken for a consumer create or info", s)
		}
	}
}

// The consumers a client creates and looks up through the proxy are kept
// as the server's replies state them; one made around the proxy is not
// (nothing is guessed of it), and the cap holds.
func TestConsumersFromTheWire(t *testing.T) {
	f := newFixture(t)
	_, js := f.client()
	ctx := context.Background()
	for _, c := range []jetstream.ConsumerConfig{
		{Durable: "none", AckPolicy: jetstream.AckNonePolicy},
		{Durable: "explicit", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 3 * time.Second},
	} {
		if _, err := js.CreateOrUpdateConsumer(ctx, f.stream, c); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.direct.CreateOrUpdateConsumer(ctx, f.stream, jetstream.ConsumerConfig{Durable: "around", AckPolicy: jetstream.AckNonePolicy}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Consumer(ctx, f.stream, "none"); err != nil { // an info
		t.Fatal(err)
	}
	want := []Consumer{
		{Stream: f.stream, Name: "none", AckPolicy: "none", From: "info"},
		{Stream: f.stream, Name: "explicit", AckPolicy: "explicit", AckWait: 3 * time.Second, From: "create"},
	}
	if diff := cmp.Diff(want, f.proxy.Consumers(), cmpopts.IgnoreFields(Consumer{}, "At")); diff != "" {
		t.Errorf("consumers (-want +got):\n%s", diff)
	}
	for i := range MaxConsumers {
		f.proxy.consumers.note(Consumer{Stream: "S", Name: fmt.Sprint(i)})
	}
	if n := len(f.proxy.Consumers()); n != MaxConsumers {
		t.Errorf("%d consumers kept, want the cap %d", n, MaxConsumers)
	}
}
