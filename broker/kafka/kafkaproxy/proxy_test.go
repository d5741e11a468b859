package kafkaproxy

import (
	"fmt"
	"testing"
	"time"

	"github.com/outboxdrill/runner/broker"
	kproxy "github.com/outboxdrill/runner/proxy/kafka"
)

// A commit of offset N acknowledges the group's latest delivery, before
// it, of each record below N on its partition: not a later redelivery,
// not the record at N, not another group's.
func TestMarkCommitted(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(int64(s), 0) }
	rec := func(off int64) kproxy.Record { return kproxy.Record{Topic: "t", Partition: 0, Offset: off} }
	dels := []kproxy.Delivery{{Record: rec(0), At: at(1)}, {Record: rec(0), At: at(2)}, {Record: rec(1), At: at(2)}, {Record: rec(0), At: at(9)}}
	out := []broker.WireMsg{{Group: "g"}, {Group: "g"}, {Group: "g"}, {Group: "g"}}
	acks := []kproxy.Ack{{At: at(5), Group: "g", Topic: "t", Partition: 0, Offset: 1}, {At: at(6), Group: "other", Topic: "t", Partition: 0, Offset: 2}}
	markCommitted(out, dels, acks)
	want := []bool{false, true, false, false}
	for i, w := range want {
		if out[i].Acked != w {
			t.Errorf("delivery %d (offset %d at %v): acked %v, want %v", i, dels[i].Offset, dels[i].At, out[i].Acked, w)
		}
	}
	if g := onlyGroup(acks); g != "" {
		t.Errorf("two groups committed: onlyGroup %q, want none", g)
	}
	if g := onlyGroup(acks[:1]); g != "g" {
		t.Errorf("one group committed: onlyGroup %q, want g", g)
	}
}

// A share group's accept or reject acknowledges the group's latest
// delivery of that record before it; a release does not.
func TestMarkShareAcked(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(int64(s), 0) }
	rec := func(off int64) kproxy.Record { return kproxy.Record{Topic: "t", Partition: 0, Offset: off} }
	dels := []kproxy.Delivery{{Record: rec(0), At: at(1)}, {Record: rec(0), At: at(2)}, {Record: rec(1), At: at(2)}, {Record: rec(2), At: at(2)}, {Record: rec(0), At: at(9)}}
	out := []broker.WireMsg{{Group: "g"}, {Group: "g"}, {Group: "g"}, {Group: "g"}, {Group: "g"}}
	acks := []kproxy.Ack{{At: at(5), Group: "g", Topic: "t", Partition: 0, Share: []kproxy.ShareAckBatch{{First: 0, Last: 2, Types: []int8{1, 2, 3}}}}}
	markCommitted(out, dels, acks)
	want := []bool{false, true, false, true, false}
	for i, w := range want {
		if out[i].Acked != w {
			t.Errorf("delivery %d (offset %d at %v): acked %v, want %v", i, dels[i].Offset, dels[i].At, out[i].Acked, w)
		}
	}
}

// The Kafka proxy is Patient: each group's JoinGroup timeouts, as the
// proxy kept them, are its Waits (a group that announced no rebalance
// timeout, v0, has its session timeout alone).
func TestWaitsAreTheJoinGroupTimeouts(t *testing.T) {
	groups := []kproxy.Group{{Name: "g", Session: 45 * time.Second, Rebalance: time.Minute}, {Name: "old", Session: 10 * time.Second}}
	got := waitsOf(groups)
	want := []broker.Wait{
		{What: "consumer group g's session timeout (JoinGroup)", For: 45 * time.Second},
		{What: "consumer group g's rebalance timeout (JoinGroup)", For: time.Minute},
		{What: "consumer group old's session timeout (JoinGroup)", For: 10 * time.Second},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("waits\n%v\nwant\n%v", got, want)
	}
}
