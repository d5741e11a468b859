package scaffold

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/guardfile"
	"github.com/outboxdrill/runner/internal/redact"
)

// InputError is what init could not do with what it was given, each
// problem naming what to add or change: exit 2, nothing written.
type InputError struct{ Problems []string }

func (e *InputError) Error() string {
	return fmt.Sprintf("%d problem(s): %v", len(e.Problems), e.Problems)
}

func inputErrorf(format string, args ...any) error {
	return &InputError{[]string{fmt.Sprintf(format, args...)}}
}

// rows are a table's rows, each a column → value map (to_jsonb's).
type rows []map[string]any

// snapshot is every table's rows (at most maxRows each), by Table.Ref.
type snapshot map[string]rows

const maxRows = 200

// readRows snapshots the tables of cat on conn.
func readRows(ctx context.Context, conn *pgx.Conn, cat *Catalog) (snapshot, error) {
	out := snapshot{}
	for _, t := range cat.Tables {
		q := fmt.Sprintf("SELECT to_jsonb(t)::text FROM %s t LIMIT %d", qualified(t), maxRows)
		rs, _ := conn.Query(ctx, q)
		var text string
		if _, err := pgx.ForEachRow(rs, []any{&text}, func() error {
			m, err := decodeRow(text)
			out[t.Ref()] = append(out[t.Ref()], m)
			return err
		}); err != nil {
			return nil, fmt.Errorf("read %s: %w", t.Ref(), err)
		}
	}
	return out, nil
}

func qualified(t *Table) string { return pgx.Identifier{t.Schema, t.Name}.Sanitize() }

func decodeRow(text string) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(text)))
	dec.UseNumber()
	var m map[string]any
	return m, dec.Decode(&m)
}

// pair is a throwaway producer and consumer database on the server at
// admin, with the schemas applied, named as the runner names its own so
// that `runner clean` takes them if init is killed, and leased meanwhile.
type pair struct {
	admin *pgx.Conn
	names [2]string
	conns [2]*pgx.Conn
}

// openPair creates the pair and applies ddl[0] and ddl[1] (files, read
// through guardfile) to it. A schema that does not apply is an
// *InputError naming its flag.
func openPair(ctx context.Context, pgURL string, files [2]string, flags [2]string) (p *pair, err error) {
	ddl := [2]string{}
	for i, f := range files {
		b, err := guardfile.Read(ctx, f, guardfile.SQL)
		if err != nil {
			return nil, inputErrorf("%s: %v", flags[i], err)
		}
		ddl[i] = string(b)
	}
	run := runID()
	cfg, err := pgx.ParseConfig(pgURL)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL %s: %w", redact.URL(pgURL), redact.Err(pgURL, err))
	}
	cfg.RuntimeParams["application_name"] = broker.LeaseName("_", run) // the lease: clean leaves the pair alone
	p = &pair{}
	if p.admin, err = pgx.ConnectConfig(ctx, cfg); err != nil {
		return nil, fmt.Errorf("PostgreSQL %s: %w", redact.URL(pgURL), redact.Err(pgURL, err))
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.close(context.WithoutCancel(ctx)))
		}
	}()
	for i, side := range []string{"p", "c"} {
		p.names[i] = fmt.Sprintf("%s_%s_0_%s", broker.NamePrefix, run, side)
		if _, err := p.admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{p.names[i]}.Sanitize()+" TEMPLATE template0"); err != nil {
			p.names[i] = ""
			return p, fmt.Errorf("create a throwaway database: %w", err)
		}
		c := cfg.Copy()
		c.Database = p.names[i]
		if p.conns[i], err = pgx.ConnectConfig(ctx, c); err != nil {
			return p, fmt.Errorf("connect to %s: %w", p.names[i], redact.Err(pgURL, err))
		}
		if _, err := p.conns[i].Exec(ctx, ddl[i]); err != nil {
			return p, inputErrorf("%s: %s does not apply to a fresh database: %v", flags[i], files[i], err)
		}
	}
	return p, nil
}

// close drops the pair.
func (p *pair) close(ctx context.Context) error {
	var errs []error
	for i, c := range p.conns {
		if c != nil {
			errs = append(errs, c.Close(ctx))
		}
		if p.names[i] != "" {
			_, err := p.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{p.names[i]}.Sanitize()+" WITH (FORCE)")
			errs = append(errs, err)
		}
	}
	return errors.Join(append(errs, p.admin.Close(ctx))...)
}

func runID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
