package state

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxdrill/runner/internal/testservers"
	schema "github.com/outboxdrill/runner/sql"
)

func TestMain(m *testing.M) { testservers.Main(m) }

// A team-shaped payload: the amount and the currency where the paths say.
var team = Map{Team: true, InboxTable: "inbox", InboxConsumer: "consumer_id", InboxEventID: "event_id", InboxPayload: "payload",
	AmountPath: []string{"data", "amountMinor"}, CurrencyPath: []string{"data", "currency"}, EventIDPath: []string{"id"}}

func TestAmountOf(t *testing.T) {
	for _, c := range []struct {
		m       Map
		payload string
		amount  int64
		cur     string
		ok      bool
	}{
		{Map{}, `{"event_id":"bus-1","amount":100,"currency":"USD"}`, 100, "USD", true},
		{team, `{"type":"PaymentCaptured","id":"x","data":{"amountMinor":1250,"currency":"EUR"}}`, 1250, "EUR", true},
		{team, `{"data":{"amountMinor":"1250","currency":"EUR"}}`, 1250, "EUR", true}, // a string holding an integer, as ::bigint takes it
		{team, `{"amount":100,"currency":"USD"}`, 0, "", false},                       // the reference fields are not the team's
		{team, `{"data":{"amountMinor":12.5,"currency":"EUR"}}`, 0, "", false},
		{team, `{"data":{"amountMinor":1,"currency":{"code":"EUR"}}}`, 0, "", false},
		{Map{AmountPath: []string{"lines", "1", "n"}}, `{"lines":[{"n":1},{"n":2}],"currency":"USD"}`, 2, "USD", true},
		{Map{}, `not json`, 0, "", false},
	} {
		amount, cur, ok := c.m.AmountOf(c.payload)
		if amount != c.amount || cur != c.cur || ok != c.ok {
			t.Errorf("%v on %s: (%d, %q, %t), want (%d, %q, %t)", c.m.AmountPath, c.payload, amount, cur, ok, c.amount, c.cur, c.ok)
		}
	}
}

// InboxSums and the inbox rows read the team's payload where the paths say,
// on a real PostgreSQL; AmountOf agrees with the SQL on every row.
func TestInboxSumsFollowThePaths(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testservers.PG(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	payloads := []string{
		`{"type":"PaymentCaptured","id":"e1","data":{"amountMinor":1250,"currency":"EUR"}}`,
		`{"type":"PaymentCaptured","id":"e2","data":{"amountMinor":50,"currency":"EUR"}}`,
		`{"type":"PaymentCaptured","id":"e3","data":{"amountMinor":7,"currency":"USD"}}`,
	}
	// A temporary table: this connection's own, gone with it.
	if _, err := conn.Exec(ctx, `CREATE TEMP TABLE inbox (consumer_id text, event_id text, payload jsonb)`); err != nil {
		t.Fatal(err)
	}
	for i, p := range payloads {
		if _, err := conn.Exec(ctx, `INSERT INTO inbox VALUES ('accounting', $1, $2)`, "entry-"+string(rune('1'+i)), p); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := conn.Query(ctx, team.InboxSums(), "accounting")
	if err != nil {
		t.Fatalf("%s: %v", team.InboxSums(), err)
	}
	got := map[string]Sum{}
	var cur string
	var s Sum
	if _, err := pgx.ForEachRow(rows, []any{&cur, &s.Amount, &s.Events}, func() error { got[cur] = s; return nil }); err != nil {
		t.Fatal(err)
	}
	want := map[string]Sum{}
	for _, p := range payloads {
		amount, cur, ok := team.AmountOf(p)
		if !ok {
			t.Fatalf("AmountOf(%s) not ok", p)
		}
		want[cur] = Sum{Amount: want[cur].Amount + amount, Events: want[cur].Events + 1}
	}
	if len(got) != 2 || got["EUR"] != (Sum{1300, 2}) || got["USD"] != (Sum{7, 1}) || got["EUR"] != want["EUR"] || got["USD"] != want["USD"] {
		t.Errorf("sums %v, AmountOf's %v; want EUR {1300 2}, USD {7 1}", got, want)
	}
	inboxes, err := InboxesOf(ctx, conn, team)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"e1", "e2", "e3"} { // the payload's id, not the inbox's entry ids
		if _, ok := inboxes["accounting"][id]; !ok {
			t.Errorf("inbox %v: want event %s, read from the payload's id", inboxes, id)
		}
	}
}

// The inbox in apply order, on a real PostgreSQL: rows ranked per
// consumer by the applied_order column, not by key or insertion into the
// heap; rows whose column ties share a rank. OrderOf reads the aggregate
// and the version where the paths say.
func TestAppliedRowsInApplyOrder(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testservers.PG(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TEMP TABLE inbox (consumer_id text, event_id text, payload jsonb, seq bigint, at timestamptz)`); err != nil {
		t.Fatal(err)
	}
	// e3 applied first (seq 1), then e1, then e2; c2's one row on its own.
	for _, r := range []struct {
		c, ev string
		seq   int
		at    string
	}{{"c", "e1", 2, "2026-01-01 00:00:01"}, {"c", "e2", 3, "2026-01-01 00:00:01"}, {"c", "e3", 1, "2026-01-01 00:00:00"}, {"c2", "e1", 9, "2026-01-01"}} {
		p := `{"id":"` + r.ev + `","acct":{"key":"a1"},"v":` + r.ev[1:] + `}`
		if _, err := conn.Exec(ctx, `INSERT INTO inbox VALUES ($1, $2, $3, $4, $5)`, r.c, r.ev, p, r.seq, r.at); err != nil {
			t.Fatal(err)
		}
	}
	m := Map{Team: true, InboxTable: "inbox", InboxConsumer: "consumer_id", InboxEventID: "event_id", InboxPayload: "payload",
		AggregatePath: []string{"acct", "key"}, VersionPath: []string{"v"}}
	if rows, err := AppliedRowsOf(ctx, conn, m); rows != nil || err != nil {
		t.Errorf("no applied_order mapped: %v, %v; want nothing read", rows, err)
	}
	show := func(rows []AppliedRow) string {
		var b strings.Builder
		for _, r := range rows {
			fmt.Fprintf(&b, "%s:%s#%d ", r.Consumer, r.Key, r.Rank)
		}
		return b.String()
	}
	for col, want := range map[string]string{"seq": "c:e3#1 c:e1#2 c:e2#3 c2:e1#1 ", "at": "c:e3#1 c:e1#2 c:e2#2 c2:e1#1 "} {
		m.AppliedOrder = col
		rows, err := AppliedRowsOf(ctx, conn, m)
		if err != nil {
			t.Fatal(err)
		}
		if got := show(rows); got != want {
			t.Errorf("by %s: %s, want %s", col, got, want)
		}
		if agg, v, ok := m.OrderOf(rows[0].Payload); agg != "a1" || v != 3 || !ok {
			t.Errorf("OrderOf(%s) = %q, %d, %t", rows[0].Payload, agg, v, ok)
		}
	}
	if _, _, ok := (Map{}).OrderOf(`{"aggregate":"a","version":1}`); ok {
		t.Error("OrderOf with no paths mapped: ok")
	}
}

// OrderOf finds the aggregate and the version where the paths say, an
// array index too; an event outside any aggregate has none, and one whose
// version is missing or no whole number gives its aggregate, not ok.
func TestOrderOf(t *testing.T) {
	ref := Reference
	idx := Map{AggregatePath: []string{"keys", "0"}, VersionPath: []string{"seq"}}
	for _, c := range []struct {
		m       Map
		payload string
		agg     string
		version int64
		ok      bool
	}{
		{ref, `{"event_id":"bus-1","aggregate":"acct-1","version":2}`, "acct-1", 2, true},
		{ref, `{"event_id":"bus-1","amount":100}`, "", 0, false},
		{ref, `{"aggregate":"acct-1","version":"2"}`, "acct-1", 2, true},
		{ref, `{"aggregate":"acct-1","version":2.5}`, "acct-1", 0, false},
		{ref, `{"aggregate":"acct-1","version":"v2"}`, "acct-1", 0, false},
		{ref, `{"aggregate":"acct-1"}`, "acct-1", 0, false},
		{ref, `{"aggregate":"","version":1}`, "", 0, false},
		{idx, `{"keys":["a7","x"],"seq":3}`, "a7", 3, true},
		{Map{}, `{"aggregate":"acct-1","version":1}`, "", 0, false},
	} {
		agg, v, ok := c.m.OrderOf(c.payload)
		if agg != c.agg || v != c.version || ok != c.ok {
			t.Errorf("%v %v on %s: (%q, %d, %t), want (%q, %d, %t)", c.m.AggregatePath, c.m.VersionPath, c.payload, agg, v, ok, c.agg, c.version, c.ok)
		}
	}
}

// The reference inbox's apply order is the order rows were inserted, on
// the reference schema itself: of two overlapping consumer transactions,
// the one that began first (A) inserts version 1 after the other (B)
// inserted version 2 and committed. received_at, now() of each
// transaction, would order A's row first and pass a consumer that applied
// version 2 first.
func TestReferenceApplyOrderIsInsertOrder(t *testing.T) {
	ctx := context.Background()
	ns := pgx.Identifier{"orderfix_" + strings.ToLower(rand.Text()[:8])}.Sanitize()
	conns := make([]*pgx.Conn, 2)
	for i := range conns {
		c, err := pgx.Connect(ctx, testservers.PG(t))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		conns[i] = c
	}
	if _, err := conns[0].Exec(ctx, "CREATE SCHEMA "+ns); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conns[0].Exec(ctx, "DROP SCHEMA "+ns+" CASCADE") }()
	for i, c := range conns {
		if _, err := c.Exec(ctx, "SET search_path TO "+ns); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if _, err := c.Exec(ctx, schema.Consumer); err != nil {
				t.Fatal(err)
			}
		}
	}
	insert := func(tx pgx.Tx, v int) {
		p := fmt.Sprintf(`{"event_id":"e%d","aggregate":"a1","version":%d}`, v, v)
		if _, err := tx.Exec(ctx, `INSERT INTO inbox (consumer_id, event_id, payload) VALUES ('c', $1, $2)`, fmt.Sprintf("e%d", v), p); err != nil {
			t.Fatal(err)
		}
	}
	a, err := conns[0].Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Exec(ctx, "SELECT now()"); err != nil { // A's now() is taken here
		t.Fatal(err)
	}
	b, err := conns[1].Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	insert(b, 2)
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	insert(a, 1)
	if err := a.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := AppliedRowsOf(ctx, conns[0], Reference)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Key != "e2" || rows[1].Key != "e1" || rows[0].Rank == rows[1].Rank {
		t.Errorf("apply order by %s: %+v, want e2 then e1, ranked apart", Reference.AppliedOrder, rows)
	}
}
