package system

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/internal/lazy"
	"github.com/outboxdrill/runner/proxy/fault"
)

// Catalog is what the team's schema made of a fresh database pair: each
// side's tables, against which a fault's table filter is checked, and the
// event ids the outbox's event_id column takes.
type Catalog struct {
	EventIDs EventIDs
	tables   [2][]table // producer, consumer
}

// The sides of a database pair, as Catalog indexes them.
const (
	ProducerSide = 0
	ConsumerSide = 1
)

var sideNames = [2]string{"producer", "consumer"}

type table struct {
	schema, name string
	visible      bool // on the search path: named without its schema
}

// String is how the table is named: bare when visible, else schema.name.
func (t table) String() string {
	if t.visible {
		return t.name
	}
	return t.schema + "." + t.name
}

// Check checks the system file against the catalog of a database pair
// that has the team's schema (producer and consumer are connections to
// it): every mapped table and column exists, the outbox's and the
// inbox's payloads are JSON, the unpublished condition, the projection
// query and the produce statement prepare (nothing is run), and the
// outbox's event_id column takes event ids. Every problem is reported at
// its place in the file, with the closest existing name. err is a failure
// to read the catalog itself: the server's, not the file's.
func (s *System) Check(ctx context.Context, producer, consumer *pgx.Conn) (cat *Catalog, problems diag.Errors, err error) {
	c := &Catalog{}
	for side, conn := range [2]*pgx.Conn{producer, consumer} {
		if c.tables[side], err = tablesOf(ctx, conn); err != nil {
			return nil, nil, fmt.Errorf("read the %s database's catalog: %w", sideNames[side], err)
		}
	}
	k := checker{s: s, c: c, ctx: ctx}
	problems = append(problems, k.outbox(producer)...)
	problems = append(problems, k.inbox(consumer)...)
	problems = append(problems, k.prepare(producer, ProducerSide, "produce", s.Produce, len(s.ProduceArgs) == 0)...)
	if s.Projection != "" {
		problems = append(problems, k.projection(consumer)...)
	}
	problems = append(problems, k.readyTables()...)
	if k.err != nil {
		return nil, nil, fmt.Errorf("read the catalog: %w", k.err)
	}
	return c, problems, nil
}

// CheckFault checks a fault's table filter against the catalog: a table
// the schema does not have is never written, so the fault could never
// strike. The error says which tables there are.
func (c *Catalog) CheckFault(t fault.Trigger) error {
	table := t.Filter.Table
	if !t.Link.Database() || table == "" {
		return nil // any table: nothing to look up
	}
	side := ProducerSide
	if t.Link == fault.ConsumerDB {
		side = ConsumerSide
	}
	// As the proxy matches it (fault.Filter.TableIs).
	for _, tab := range c.tables[side] {
		if t.Filter.TableIs(tab.schema + "." + tab.name) {
			return nil
		}
	}
	names := tableNames(c.tables[side])
	return fmt.Errorf("%s: no table %q in the %s database after its schema%s; tables: %s",
		t.On(), table, sideNames[side], diag.Suggest(table, names), strings.Join(names, ", "))
}

// checker gathers what a Check found; err is a failure to read the catalog
// itself (not a problem of the file), kept once.
type checker struct {
	s   *System
	c   *Catalog
	ctx context.Context
	err error
}

func (k *checker) outbox(conn *pgx.Conn) diag.Errors {
	o := k.s.Outbox
	cols, errs := k.columns(conn, ProducerSide, "outbox", o.Table)
	if cols == nil {
		return errs
	}
	errs = append(errs, k.column(cols, "outbox.event_id", o.Table, o.EventID)...)
	errs = append(errs, k.payloadColumn(cols, "outbox.payload", o.Table, o.Payload)...)
	if typ, ok := cols[o.EventID]; ok {
		ids, err := NewEventIDs(o.Table+"."+o.EventID, typ)
		if err != nil {
			errs = append(errs, diag.Errorf(k.s.At("outbox.event_id"), "outbox.event_id: %v", err))
		}
		k.c.EventIDs = ids
	}
	cond := fmt.Sprintf("SELECT count(*) FROM %s WHERE %s", quoteIdent(o.Table), o.Unpublished)
	return append(errs, k.prepare(conn, ProducerSide, "outbox.unpublished", cond, false)...)
}

func (k *checker) inbox(conn *pgx.Conn) diag.Errors {
	in := k.s.Inbox
	cols, errs := k.columns(conn, ConsumerSide, "inbox", in.Table)
	if cols == nil {
		return errs
	}
	errs = append(errs, k.column(cols, "inbox.consumer", in.Table, in.Consumer)...)
	errs = append(errs, k.column(cols, "inbox.event_id", in.Table, in.EventID)...)
	if in.AppliedOrder != "" {
		errs = append(errs, k.orderColumn(cols, "inbox.applied_order", in.Table, in.AppliedOrder)...)
	}
	return append(errs, k.payloadColumn(cols, "inbox.payload", in.Table, in.Payload)...)
}

// orderTypes are the column types an apply order is read from: a serial
// or identity is an integer, a clock_timestamp() default a timestamp.
var orderTypes = []string{"smallint", "integer", "bigint", "numeric", "timestamp without time zone", "timestamp with time zone"}

func (k *checker) orderColumn(cols map[string]string, key, tableName, name string) diag.Errors {
	if errs := k.column(cols, key, tableName, name); errs != nil {
		return errs
	}
	if typ := cols[name]; !slices.Contains(orderTypes, typ) {
		return diag.Errors{diag.Errorf(k.s.At(key), "%s: column %s.%s is of type %s: the apply order is read from a serial, bigserial or identity (an integer) or a timestamp", key, tableName, name, typ)}
	}
	return nil
}

// projection prepares the projection query and checks it returns the four
// columns the runner reads.
func (k *checker) projection(conn *pgx.Conn) diag.Errors {
	sd, errs := k.describe(conn, ConsumerSide, "projection", k.s.Projection, false)
	if sd == nil || len(sd.Fields) == 4 {
		return errs
	}
	names := make([]string, len(sd.Fields))
	for i, f := range sd.Fields {
		names[i] = f.Name
	}
	return append(errs, diag.Errorf(k.s.At("projection"), "projection: returns %d column(s) (%s); want 4: consumer id, currency, amount, events",
		len(sd.Fields), strings.Join(names, ", ")))
}

// columns reads the columns of a mapped table (name → type), or reports
// at key.table that the side has no such table. nil: no table.
func (k *checker) columns(conn *pgx.Conn, side int, key, name string) (map[string]string, diag.Errors) {
	rows, err := conn.Query(k.ctx, `SELECT a.attname, format_type(coalesce(nullif(t.typbasetype, 0), a.atttypid), NULL)
		FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
		WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`, quoteIdent(name))
	if err != nil {
		k.fail(err)
		return nil, nil
	}
	cols := map[string]string{}
	var col, typ string
	if _, err := pgx.ForEachRow(rows, []any{&col, &typ}, func() error { cols[col] = typ; return nil }); err != nil {
		k.fail(err)
		return nil, nil
	}
	if len(cols) > 0 {
		return cols, nil
	}
	names := tableNames(k.c.tables[side])
	return nil, diag.Errors{diag.Errorf(k.s.At(key+".table"), "%s.table: no table %q in the %s database after its schema%s; tables: %s",
		key, name, sideNames[side], diag.Suggest(name, names), listOrNone(names))}
}

// column reports at key a column the table lacks. Names are matched
// exactly: the runner quotes them, so Event_ID is not event_id.
func (k *checker) column(cols map[string]string, key, tableName, name string) diag.Errors {
	if _, ok := cols[name]; ok {
		return nil
	}
	names := slices.Sorted(maps.Keys(cols))
	return diag.Errors{diag.Errorf(k.s.At(key), "%s: no column %q in table %s%s; its columns: %s", key, name, tableName, diag.Suggest(name, names), strings.Join(names, ", "))}
}

// jsonTypes are the column types a payload is read from (cast to jsonb).
var jsonTypes = []string{"json", "jsonb", "text", "character varying"}

func (k *checker) payloadColumn(cols map[string]string, key, tableName, name string) diag.Errors {
	if errs := k.column(cols, key, tableName, name); errs != nil {
		return errs
	}
	if typ := cols[name]; !slices.Contains(jsonTypes, typ) {
		return diag.Errors{diag.Errorf(k.s.At(key), "%s: column %s.%s is of type %s: the runner reads payloads as JSON (json, jsonb or text)", key, tableName, name, typ)}
	}
	return nil
}

// prepare prepares sql on conn (parsed and planned, never run) and
// reports at key what PostgreSQL finds wrong with it.
func (k *checker) prepare(conn *pgx.Conn, side int, key, sql string, simple bool) diag.Errors {
	_, errs := k.describe(conn, side, key, sql, simple)
	return errs
}

// describe prepares sql and returns its description. simple: the runner
// sends sql without parameters, in the simple protocol, where several
// statements are allowed; a prepared statement holds one only, so that
// complaint is no problem of the file.
func (k *checker) describe(conn *pgx.Conn, side int, key, sql string, simple bool) (*pgconn.StatementDescription, diag.Errors) {
	sd, err := conn.PgConn().Prepare(k.ctx, "", sql, nil)
	if err == nil {
		return sd, nil
	}
	var pg *pgconn.PgError
	if !errors.As(err, &pg) {
		k.fail(err)
		return nil, nil
	}
	if simple && pg.Code == "42601" && strings.Contains(pg.Message, "multiple commands") {
		return nil, nil
	}
	return nil, diag.Errors{diag.Errorf(k.s.At(key), "%s: %s", key, k.explain(conn, side, pg))}
}

var (
	undefinedColumn = lazy.Regexp(`^column (?:"([^"]+)"|(?:\S+\.)?(\S+))(?: of relation "[^"]+")? does not exist`)
	undefinedTable  = lazy.Regexp(`^relation "([^"]+)" does not exist`)
)

// explain is PostgreSQL's error with the closest existing name to the
// one it did not find, else with its hint.
func (k *checker) explain(conn *pgx.Conn, side int, pg *pgconn.PgError) string {
	msg := fmt.Sprintf("%s (SQLSTATE %s)", pg.Message, pg.Code)
	suggestion := ""
	if m := undefinedTable().FindStringSubmatch(pg.Message); m != nil {
		suggestion = diag.Suggest(m[1], tableNames(k.c.tables[side]))
	} else if m := undefinedColumn().FindStringSubmatch(pg.Message); m != nil {
		if cols, err := allColumns(k.ctx, conn); err == nil {
			suggestion = diag.Suggest(m[1]+m[2], cols)
		}
	}
	switch {
	case suggestion != "":
		return msg + suggestion
	case pg.Hint != "":
		return msg + "; hint: " + pg.Hint
	}
	return msg
}

func (k *checker) fail(err error) {
	if k.err == nil {
		k.err = err
	}
}

// tablesOf lists the side's own tables, views and foreign tables.
func tablesOf(ctx context.Context, conn *pgx.Conn) ([]table, error) {
	rows, err := conn.Query(ctx, `SELECT n.nspname, c.relname, pg_table_is_visible(c.oid)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\_%'
		ORDER BY 3 DESC, 1, 2`)
	if err != nil {
		return nil, err
	}
	var out []table
	var t table
	_, err = pgx.ForEachRow(rows, []any{&t.schema, &t.name, &t.visible}, func() error { out = append(out, t); return nil })
	return out, err
}

// allColumns lists the column names of the side's own tables, for the
// suggestion on an unknown column in a query.
func allColumns(ctx context.Context, conn *pgx.Conn) ([]string, error) {
	rows, err := conn.Query(ctx, `SELECT DISTINCT a.attname FROM pg_attribute a
		JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\_%'
		AND a.attnum > 0 AND NOT a.attisdropped ORDER BY 1`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func tableNames(ts []table) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.String()
	}
	return out
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// quoteIdent quotes a checked table name, schema.name allowed, exactly as
// the runner's queries do.
func quoteIdent(name string) string {
	schema, rel, ok := strings.Cut(name, ".")
	if !ok {
		return pgx.Identifier{name}.Sanitize()
	}
	return pgx.Identifier{schema, rel}.Sanitize()
}
