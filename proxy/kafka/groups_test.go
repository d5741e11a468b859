package kafka

import (
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kafkajs 2.2.4's two JoinGroups (v5) of a consumer with sessionTimeout
// 7000 and rebalanceTimeout 9000 in group jg-group, as it wrote them to
// kfake: the first with no member id, the second with the one the
// coordinator gave it.
const (
	kafkajsJoin1 = "0000005b000b00050000000300076b61666b616a7300086a672d67726f757000001b58000023280000ffff0008636f6e73756d6572000000010012526f756e64526f62696e41737369676e65720000000e00000000000100026a6700000000"
	kafkajsJoin2 = "00000083000b00050000000400076b61666b616a7300086a672d67726f757000001b580000232800286b61666b616a732d3831373330633339363337383235636134643762323061356265353737353162ffff0008636f6e73756d6572000000010012526f756e64526f62696e41737369676e65720000000e00000000000100026a6700000000"
)

func TestParseJoinGroup(t *testing.T) {
	for _, raw := range []string{kafkajsJoin1, kafkajsJoin2} {
		b, _ := hex.DecodeString(raw)
		q, err := parseRequest(b)
		if err != nil || q.unread != "" || q.group != "jg-group" || q.session != 7000 || q.rebalance != 9000 {
			t.Errorf("kafkajs JoinGroup: %v %q group %q session %d rebalance %d, want jg-group 7000 9000", err, q.unread, q.group, q.session, q.rebalance)
		}
	}
	// Every version as franz-go encodes it: v0 announces no rebalance
	// timeout, v6 on are flexible.
	for v := int16(0); v <= 9; v++ {
		r := kmsg.NewJoinGroupRequest()
		r.Version, r.Group, r.SessionTimeoutMillis, r.RebalanceTimeoutMillis, r.ProtocolType = v, "g", 45000, 60000, "consumer"
		r.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "cooperative-sticky", Metadata: []byte{0, 1}}}
		q, err := parseRequest(frame(keyJoinGroup, v, 1, r.AppendTo(nil)))
		want := int32(60000)
		if v == 0 {
			want = 0
		}
		if err != nil || q.unread != "" || q.group != "g" || q.session != 45000 || q.rebalance != want {
			t.Errorf("v%d: %v %q group %q session %d rebalance %d, want g 45000 %d", v, err, q.unread, q.group, q.session, q.rebalance, want)
		}
	}
}

// A group franz-go joins through the proxy (to kfake) is kept with the
// timeouts it announced; the cap holds.
func TestGroupsFromJoinGroup(t *testing.T) {
	f := newFixture(t)
	if err := produce(f.client(), "e1"); err != nil {
		t.Fatal(err)
	}
	group := f.topic + "-g"
	cons := f.client(kgo.ConsumerGroup(group), kgo.ConsumeTopics(f.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(7*time.Second), kgo.RebalanceTimeout(9*time.Second))
	poll(t, cons, 1)
	want := []Group{{Name: group, Session: 7 * time.Second, Rebalance: 9 * time.Second}}
	if diff := cmp.Diff(want, f.proxy.Groups()); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}
	// A longer timeout a later JoinGroup announces is kept; a shorter
	// one does not shorten it.
	for _, ms := range [][2]int32{{10000, 1000}, {1000, 20000}} {
		f.proxy.groups.join(&request{header: header{key: keyJoinGroup}, group: group, session: ms[0], rebalance: ms[1]})
	}
	want[0].Session, want[0].Rebalance = 10*time.Second, 20*time.Second
	if diff := cmp.Diff(want, f.proxy.Groups()); diff != "" {
		t.Errorf("groups after two more joins (-want +got):\n%s", diff)
	}
	for i := range MaxGroups {
		f.proxy.groups.join(&request{header: header{key: keyJoinGroup}, group: fmt.Sprint(i), session: 1})
	}
	if n := len(f.proxy.Groups()); n != MaxGroups {
		t.Errorf("%d groups kept, want the cap %d", n, MaxGroups)
	}
}
