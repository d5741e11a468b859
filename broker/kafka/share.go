package kafka

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Share groups (KIP-932, Options.Share): the broker hands each record to
// one member under an acquisition lock and counts its deliveries; a member
// accepts (Ack), releases (Nack: redelivered, to any member, with the count
// raised) or loses it with its connection (Crash: released at once). What
// a member was handed and did not settle is accepted by its next poll
// (franz-go, like the Java client's implicit mode): a failed record the
// worker keeps (nack: false) is therefore acknowledged by the next read.

// shareOpts: a member of the topic's share group.
func (t *Topic) shareOpts(m *member) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(t.seeds...),
		kgo.ShareGroup(t.groupID(m.key.group)),
		kgo.ConsumeTopics(t.name),
		kgo.FetchMaxWait(100 * time.Millisecond),
	}
}

// startAtEarliest sets the share group's share.auto.offset.reset to
// earliest (the default, latest, would skip what was published before the
// group's first member joined: a late group reads history, as elsewhere).
func (t *Topic) startAtEarliest(ctx context.Context, group string) error {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	r.ResourceName = t.groupID(group)
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Op = "share.auto.offset.reset", kmsg.IncrementalAlterConfigOpSet
	earliest := "earliest"
	c.Value = &earliest
	r.Configs = append(r.Configs, c)
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(ctx, t.prod)
	if err != nil {
		return fmt.Errorf("kafka share group %s: set share.auto.offset.reset: %w", r.ResourceName, err)
	}
	for _, rr := range resp.Resources {
		if err := kerr.ErrorForCode(rr.ErrorCode); err != nil {
			return fmt.Errorf("kafka share group %s: set share.auto.offset.reset: %w", r.ResourceName, err)
		}
	}
	return nil
}

// settle acknowledges the member's records offs with status and waits until
// the broker has them.
func (m *member) settle(ctx context.Context, offs map[int32][]int64, status kgo.AckStatus) error {
	var recs []*kgo.Record
	m.mu.Lock()
	for p, os := range offs {
		for _, o := range os {
			if r := m.held[p][o]; r != nil {
				recs = append(recs, r)
				delete(m.held[p], o)
			}
		}
	}
	m.mu.Unlock()
	m.cl.MarkAcks(status, recs...)
	if err := m.cl.FlushAcks(ctx); err != nil {
		return fmt.Errorf("kafka share ack (%s) %s as %s/%s: %w", status, m.t.name, m.key.group, m.key.worker, err)
	}
	return nil
}
