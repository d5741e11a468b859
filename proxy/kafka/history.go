package kafka

import "time"

// Publish is a record a Produce carried that the broker stored (its
// partition answered without error, or as a duplicate it had already
// stored).
type Publish struct {
	Record
	Conn            int
	At              time.Time // when the response crossed
	TransactionalID string
	// Outcome is a transactional record's: "committed" or "aborted" once
	// its EndTxn succeeded, else "" (also for a record of no
	// transaction).
	Outcome string
	Fault   string
	Copy    bool // the proxy's second send of its Produce (a duplicate fault), not the service's
}

// Delivery is a record a Fetch or ShareFetch handed the client.
type Delivery struct {
	Record
	Conn  int
	At    time.Time
	API   string // Fetch or ShareFetch
	Group string // a share group's; a Fetch names none
	// DeliveryCount is a share group's count of this record's deliveries,
	// this one included (0 for a Fetch).
	DeliveryCount int16
	Dropped       bool // an error fault replaced the response
	Fault         string
}

// Ack is a group's commit of a partition's offset (OffsetCommit,
// TxnOffsetCommit: Offset is the next the group reads), or a share group's
// acknowledgement of a range of offsets, that the broker accepted.
type Ack struct {
	Conn            int
	At              time.Time
	API             string
	Group           string
	Topic           string
	Partition       int32
	Offset          int64
	Share           []ShareAckBatch
	TransactionalID string
	Outcome         string // a TxnOffsetCommit's: "committed" or "aborted" once its EndTxn succeeded
}

// History sorts the relayed requests into publishes, deliveries and acks,
// in the order the proxy saw their responses. A request a fault kept
// from the broker is left out; a response a fault replaced keeps its
// deliveries, Dropped.
func (p *Proxy) History() (pubs []Publish, dels []Delivery, acks []Ack) {
	open := map[string][]txnPart{} // by transactional id: what its EndTxn decides
	for _, e := range p.Events() {
		if !e.Answered {
			continue
		}
		switch e.Kind {
		case KindProduce:
			for _, r := range e.Records {
				pubs = append(pubs, Publish{Record: r, Conn: e.Conn, At: e.At, TransactionalID: e.TransactionalID, Fault: e.Fault, Copy: e.Copy})
				if e.TransactionalID != "" {
					open[e.TransactionalID] = append(open[e.TransactionalID], txnPart{pub: true, i: len(pubs) - 1})
				}
			}
		case KindFetch:
			for i, r := range e.Records {
				d := Delivery{Record: r, Conn: e.Conn, At: e.At, API: e.API, Group: e.Group, Dropped: e.Dropped, Fault: e.Fault}
				if i < len(e.DeliveryCounts) {
					d.DeliveryCount = e.DeliveryCounts[i]
				}
				dels = append(dels, d)
			}
			acks = appendAcks(acks, e, open)
		case KindCommit, KindShareAck:
			acks = appendAcks(acks, e, open)
		case KindEndTxn:
			if e.ErrorCode == 0 {
				outcome := "aborted"
				if e.Commit {
					outcome = "committed"
				}
				for _, t := range open[e.TransactionalID] {
					if t.pub {
						pubs[t.i].Outcome = outcome
					} else {
						acks[t.i].Outcome = outcome
					}
				}
			}
			delete(open, e.TransactionalID)
		}
	}
	return pubs, dels, acks
}

// txnPart is a publish's or an ack's place, awaiting its transaction's
// end.
type txnPart struct {
	pub bool
	i   int
}

// appendAcks adds a request's accepted commits or acknowledgements.
func appendAcks(acks []Ack, e Event, open map[string][]txnPart) []Ack {
	if e.ErrorCode != 0 {
		return acks
	}
	for _, p := range e.Partitions {
		if p.ErrorCode != 0 || e.Kind == KindFetch && len(p.Acks) == 0 {
			continue
		}
		acks = append(acks, Ack{Conn: e.Conn, At: e.At, API: e.API, Group: e.Group, Topic: p.Topic, Partition: p.Partition,
			Offset: p.Offset, Share: p.Acks, TransactionalID: e.TransactionalID})
		if e.TransactionalID != "" {
			open[e.TransactionalID] = append(open[e.TransactionalID], txnPart{i: len(acks) - 1})
		}
	}
	return acks
}
