package scaffold

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/outboxdrill/runner/pipeline"
	"github.com/outboxdrill/runner/system"
)

// found is what the catalogs offer, and the first choice of each, before
// the probe: the probe runs with those, and its evidence confirms or
// replaces them.
type found struct {
	cats        [2]*Catalog
	outboxes    []*Outbox
	inboxes     []*Inbox
	models      []*ReadModel
	outbox      *Outbox
	eventID     *Column
	payload     *Column
	marker      Marker
	produce     Produce
	ids         system.EventIDs
	probeID     string
	payloadJSON string
	// inserted is the probe row as produce wrote it; before, the tables
	// after the schemas and the probe's insert.
	inserted map[string]any
	before   [2]snapshot
}

var flags = [2]string{"--schema-producer", "--schema-consumer"}

// discover applies the schemas to a throwaway pair, reads the catalogs,
// picks the candidates and inserts the probe event as produce would.
func (in *Init) discover(ctx context.Context) (f *found, err error) {
	var files [2]string
	for i, s := range in.p.Schemas {
		files[i] = s
	}
	p, err := openPair(ctx, in.pgURL, files, flags)
	if p != nil {
		defer func() { err = errors.Join(err, p.close(context.WithoutCancel(ctx))) }()
	}
	if err != nil {
		return nil, err
	}
	f = &found{}
	for i, c := range p.conns {
		if f.cats[i], err = ReadCatalog(ctx, c); err != nil {
			return nil, err
		}
	}
	f.outboxes, f.inboxes = Outboxes(f.cats[0]), Inboxes(f.cats[1])
	f.models = ReadModels(f.cats[1], f.inboxes)
	if err := f.choose(in.p.Outbox, in.p.Inbox); err != nil {
		return nil, err
	}
	if err := f.insertProbe(ctx, p); err != nil {
		return nil, err
	}
	for i, c := range p.conns {
		if f.before[i], err = readRows(ctx, c, f.cats[i]); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// choose takes the candidate of each that --outbox and --inbox name, else
// the first; no outbox or no inbox is an *InputError naming what the
// tables lack.
func (f *found) choose(outbox, inbox string) error {
	if err := f.pick(outbox, inbox); err != nil {
		return err
	}
	var problems []string
	if len(f.outboxes) == 0 {
		problems = append(problems, fmt.Sprintf("%s: no table looks like an outbox: one needs an event id column (text, uuid or an integer; NOT NULL and unique), a payload column (json, jsonb, or text named like payload) and an unpublished marker (a nullable timestamp, or a boolean, named like sent, published, processed, shipped); tables: %s",
			flags[0], describe(f.cats[0])))
	}
	if len(f.inboxes) == 0 {
		problems = append(problems, fmt.Sprintf("%s: no table looks like an inbox: one needs a unique index or primary key over a consumer column (text, named like consumer, handler, subscriber, group) and an event id column, and a payload column (json, jsonb, or text named like payload); tables: %s",
			flags[1], describe(f.cats[1])))
	}
	if len(problems) > 0 {
		return &InputError{problems}
	}
	o := f.outboxes[0]
	f.outbox, f.eventID, f.payload, f.marker = o, o.EventIDs[0], o.Payloads[0], o.Markers[0]
	return f.build()
}

// pick puts the outbox and inbox candidates named first; a name that is
// none is an *InputError naming the candidates.
func (f *found) pick(outbox, inbox string) error {
	var problems []string
	if outbox != "" {
		i := slices.IndexFunc(f.outboxes, func(o *Outbox) bool { return o.Table.Ref() == outbox || o.Table.Name == outbox })
		if i < 0 {
			problems = append(problems, fmt.Sprintf("--outbox %s: no such table shaped like an outbox in %s; those that are: %s", outbox, flags[0], refs(f.outboxes, func(o *Outbox) *Table { return o.Table })))
		} else {
			f.outboxes = append([]*Outbox{f.outboxes[i]}, slices.Delete(slices.Clone(f.outboxes), i, i+1)...)
		}
	}
	if inbox != "" {
		i := slices.IndexFunc(f.inboxes, func(in *Inbox) bool { return in.Table.Ref() == inbox || in.Table.Name == inbox })
		if i < 0 {
			problems = append(problems, fmt.Sprintf("--inbox %s: no such table shaped like an inbox in %s; those that are: %s", inbox, flags[1], refs(f.inboxes, func(in *Inbox) *Table { return in.Table })))
		} else {
			f.inboxes = append([]*Inbox{f.inboxes[i]}, slices.Delete(slices.Clone(f.inboxes), i, i+1)...)
		}
	}
	if len(problems) > 0 {
		return &InputError{problems}
	}
	return nil
}

func refs[T any](xs []T, table func(T) *Table) string {
	if len(xs) == 0 {
		return "none"
	}
	var out []string
	for _, x := range xs {
		out = append(out, table(x).Ref())
	}
	return strings.Join(out, ", ")
}

// build makes the produce statement and the probe's id for the chosen
// event id column.
func (f *found) build() error {
	var err error
	if f.produce, err = BuildProduce(f.outbox.Table, f.eventID, f.payload); err != nil {
		return &InputError{[]string{flags[0] + ": " + err.Error()}}
	}
	if f.ids, err = system.NewEventIDs(f.outbox.Table.Ref()+"."+f.eventID.Name, f.eventID.Type); err != nil {
		return &InputError{[]string{flags[0] + ": " + err.Error()}}
	}
	f.probeID = f.ids.ID(probeName)
	f.payloadJSON = pipeline.Transfer{EventID: f.probeID, From: "alice", To: "bob", Amount: probeAmount, Currency: probeCurrency}.Payload()
	return nil
}

// insertProbe runs the produce statement for the probe event on the
// throwaway producer database and reads the row back as it was inserted.
func (f *found) insertProbe(ctx context.Context, p *pair) error {
	sql, names := Bind(f.produce.SQL)
	args := make([]any, len(names))
	for i, n := range names {
		args[i] = map[string]any{"event": f.probeID, "payload": f.payloadJSON, "amount": int64(probeAmount), "currency": probeCurrency}[n]
	}
	if _, err := p.conns[0].Exec(ctx, sql, args...); err != nil {
		return &InputError{[]string{fmt.Sprintf("%s: the INSERT init built from %s's NOT NULL columns fails: %v; write produce: yourself: %s",
			flags[0], f.outbox.Table.Ref(), err, f.produce.SQL)}}
	}
	q := fmt.Sprintf("SELECT to_jsonb(t)::text FROM %s t WHERE %s::text = $1", qualified(f.outbox.Table), Ident(f.eventID.Name))
	var text string
	if err := p.conns[0].QueryRow(ctx, q, f.probeID).Scan(&text); err != nil {
		return fmt.Errorf("read the probe row back: %w", err)
	}
	var err error
	f.inserted, err = decodeRow(text)
	return err
}

// describe lists the tables with their columns and types.
func describe(cat *Catalog) string {
	if len(cat.Tables) == 0 {
		return "none"
	}
	var parts []string
	for _, t := range cat.Tables {
		var cols []string
		for _, c := range t.Columns {
			cols = append(cols, c.Name+" "+c.Type)
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", t.Ref(), strings.Join(cols, ", ")))
	}
	return strings.Join(parts, "; ")
}
