package scaffold

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// Catalog is one database's tables after the team's schema, as
// pg_catalog describes them.
type Catalog struct {
	Tables []*Table
}

// Table is one table with what init reads of it.
type Table struct {
	Schema, Name string
	Visible      bool // on the search path: named without its schema
	Columns      []*Column
	// Uniques are its unique indexes without a predicate (the primary key
	// among them), each its columns in index order.
	Uniques [][]string
	Primary []string // the primary key's columns, nil without one
}

// Column is one column of a table.
type Column struct {
	Name    string
	Type    string // format_type without modifiers: text, jsonb, timestamp with time zone
	NotNull bool
	// Default: the column has a default, is an identity or is generated: an
	// INSERT may leave it out.
	Default bool
	Enum    string // an enum's first label ("" for another type)
}

// Ref is how SQL names the table: bare when on the search path.
func (t *Table) Ref() string {
	if t.Visible {
		return t.Name
	}
	return t.Schema + "." + t.Name
}

// Column is the column named name, nil without one.
func (t *Table) Column(name string) *Column {
	for _, c := range t.Columns {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// Unique reports whether cols (in any order) are exactly one unique index's.
func (t *Table) Unique(cols ...string) bool {
	for _, u := range t.Uniques {
		if len(u) == len(cols) && !slices.ContainsFunc(cols, func(c string) bool { return !slices.Contains(u, c) }) {
			return true
		}
	}
	return false
}

// Table is the table named name (bare or schema.name), nil without one.
func (c *Catalog) Table(name string) *Table {
	for _, t := range c.Tables {
		if t.Ref() == name || t.Schema+"."+t.Name == name {
			return t
		}
	}
	return nil
}

const tablesSQL = `SELECT c.oid, n.nspname, c.relname, pg_catalog.pg_table_is_visible(c.oid)
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_toast%'
ORDER BY n.nspname, c.relname`

const columnsSQL = `SELECT a.attrelid, a.attname, pg_catalog.format_type(a.atttypid, NULL), a.attnotnull,
       a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> '',
       COALESCE((SELECT e.enumlabel FROM pg_catalog.pg_enum e WHERE e.enumtypid = a.atttypid ORDER BY e.enumsortorder LIMIT 1), '')
FROM pg_catalog.pg_attribute a
WHERE a.attrelid = ANY($1) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attrelid, a.attnum`

const uniquesSQL = `SELECT i.indrelid, i.indisprimary,
       ARRAY(SELECT a.attname FROM unnest(i.indkey) WITH ORDINALITY AS k(num, ord)
             JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.num ORDER BY k.ord)
FROM pg_catalog.pg_index i
WHERE i.indisunique AND i.indpred IS NULL AND i.indrelid = ANY($1)
ORDER BY i.indrelid, NOT i.indisprimary, i.indexrelid`

// ReadCatalog reads the tables of the database conn is connected to.
func ReadCatalog(ctx context.Context, conn *pgx.Conn) (*Catalog, error) {
	byOID := map[uint32]*Table{}
	var oids []uint32
	cat := &Catalog{}
	rows, _ := conn.Query(ctx, tablesSQL)
	var oid uint32
	var t Table
	if _, err := pgx.ForEachRow(rows, []any{&oid, &t.Schema, &t.Name, &t.Visible}, func() error {
		tab := t
		cat.Tables = append(cat.Tables, &tab)
		byOID[oid], oids = &tab, append(oids, oid)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read the tables: %w", err)
	}
	var c Column
	rows, _ = conn.Query(ctx, columnsSQL, oids)
	if _, err := pgx.ForEachRow(rows, []any{&oid, &c.Name, &c.Type, &c.NotNull, &c.Default, &c.Enum}, func() error {
		col := c
		byOID[oid].Columns = append(byOID[oid].Columns, &col)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read the columns: %w", err)
	}
	var primary bool
	var cols []string
	rows, _ = conn.Query(ctx, uniquesSQL, oids)
	if _, err := pgx.ForEachRow(rows, []any{&oid, &primary, &cols}, func() error {
		tab := byOID[oid]
		tab.Uniques = append(tab.Uniques, slices.Clone(cols))
		if primary {
			tab.Primary = slices.Clone(cols)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read the unique indexes: %w", err)
	}
	return cat, nil
}
