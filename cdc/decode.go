package cdc

import (
	"fmt"

	"github.com/jackc/pglogrepl"
)

// Event is one committed outbox insert decoded from the slot.
type Event struct {
	EventID string
	Payload string
	// Commit is the end of its transaction's commit record: confirming it
	// tells the slot the event is done.
	Commit pglogrepl.LSN
}

// decoder turns pgoutput messages (protocol 1) into the outbox events of
// each committed transaction. It knows a relation from its Relation
// message, sent before its first change in a session.
type decoder struct {
	rels map[uint32]*pglogrepl.RelationMessage
	open []Event // inserts of the transaction being decoded
}

// feed decodes one message; at a Commit it returns that transaction's
// events, every one carrying the commit's end LSN.
func (d *decoder) feed(data []byte) ([]Event, error) {
	if d.rels == nil {
		d.rels = map[uint32]*pglogrepl.RelationMessage{}
	}
	msg, err := pglogrepl.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("decode pgoutput: %w", err)
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		d.rels[m.RelationID] = m
	case *pglogrepl.BeginMessage:
		d.open = d.open[:0]
	case *pglogrepl.InsertMessage:
		ev, err := d.outboxRow(m)
		if err != nil {
			return nil, err
		}
		d.open = append(d.open, ev)
	case *pglogrepl.CommitMessage:
		out := make([]Event, len(d.open))
		for i, ev := range d.open {
			ev.Commit = m.TransactionEndLSN
			out[i] = ev
		}
		d.open = d.open[:0]
		return out, nil
	}
	return nil, nil
}

// outboxRow reads event_id and payload (text format) of an outbox insert.
func (d *decoder) outboxRow(m *pglogrepl.InsertMessage) (Event, error) {
	rel := d.rels[m.RelationID]
	if rel == nil {
		return Event{}, fmt.Errorf("decode pgoutput: an insert into relation %d before its Relation message", m.RelationID)
	}
	var ev Event
	for i, col := range m.Tuple.Columns {
		if i >= len(rel.Columns) || col.DataType != pglogrepl.TupleDataTypeText {
			continue
		}
		switch rel.Columns[i].Name {
		case "event_id":
			ev.EventID = string(col.Data)
		case "payload":
			ev.Payload = string(col.Data)
		}
	}
	if ev.EventID == "" {
		return Event{}, fmt.Errorf("decode pgoutput: an insert into %s.%s without event_id", rel.Namespace, rel.RelationName)
	}
	return ev, nil
}
