package world

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/jackc/pgx/v5"

	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/internal/guardfile"
	"github.com/outboxdrill/runner/internal/redact"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/steps"
	"github.com/outboxdrill/runner/system"
)

// InvalidError is input found wrong once a database could tell: a system
// file's mapping that the team's own schema does not have, a fault on a
// table it lacks, DDL that does not apply. Nothing ran; like a load error
// it is the scenario author's to fix (the CLI exits 2), not a failed
// scenario and not a server problem.
type InvalidError struct{ Errs diag.Errors }

func (e *InvalidError) Error() string { return e.Errs.Error() }

// CheckSystems checks every system file the scenarios use, and sys when
// not nil (a file no scenario uses yet), against the team's schema, as run
// does before anything runs (see World.CheckSystems), on the PostgreSQL cfg
// names or, without one, on a server of the runner's own. It reports the
// files it checked; a problem of the files is an *InvalidError.
func CheckSystems(ctx context.Context, cfg Config, scs []*scenario.Scenario, sys *system.System) (checked []string, err error) {
	systems := systemsOf(scs, sys)
	if len(systems) == 0 {
		return nil, nil
	}
	w, err := Open(ctx, &cfg, Shape{}) // no broker: only PostgreSQL knows the catalog
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, w.Close()) }()
	for _, s := range systems {
		checked = append(checked, s.File)
	}
	return checked, w.CheckSystems(ctx, scs, sys)
}

// CheckSystems applies each system file's schema to a throwaway database
// pair, checks the file's mappings and the faults of the scenarios that use
// it against the catalog, and drops the pair: once per file and run, before
// any scenario starts, so that a wrong name fails nothing half-way. What
// it found stays for AcquireSystem: the catalog (the event ids the outbox
// takes) and the schema files' DDL, read here once for the whole run.
func (w *World) CheckSystems(ctx context.Context, scs []*scenario.Scenario, extra ...*system.System) error {
	var errs diag.Errors
	for _, sys := range systemsOf(scs, extra...) {
		ck, serrs, err := w.checkSystem(ctx, sys)
		if err != nil {
			return fmt.Errorf("check %s against its schema: %w", sys.File, err)
		}
		errs = append(errs, serrs...)
		if ck == nil {
			continue
		}
		w.sysMu.Lock()
		if w.systems == nil {
			w.systems = map[string]*checkedSystem{}
		}
		w.systems[systemKey(sys)] = ck
		w.sysMu.Unlock()
		cat := ck.cat
		for _, sc := range scs {
			if sc.System != nil && systemKey(sc.System) == systemKey(sys) {
				errs = append(errs, faultTables(sc, cat)...)
			}
		}
	}
	if len(errs) > 0 {
		errs.Sort()
		return &InvalidError{errs}
	}
	return nil
}

// faultTables checks the table of every fault the scenario's steps arm
// against the catalog.
func faultTables(sc *scenario.Scenario, cat *system.Catalog) diag.Errors {
	var errs diag.Errors
	for _, c := range sc.Steps {
		for _, st := range steps.Triggers(c) {
			if err := cat.CheckFault(st.Trigger); err != nil {
				errs = append(errs, diag.Errorf(st.Pos, "on: %v", err))
			}
		}
	}
	return errs
}

// checkedSystem is a system file as CheckSystems found it.
type checkedSystem struct {
	cat *system.Catalog
	// ddl are its schema files' text (schema.producer, schema.consumer;
	// "" where it names none), read once: every scenario's pair gets it.
	ddl [2]string
}

// checked is what CheckSystems found of sys, nil when it did not check it.
func (w *World) checked(sys *system.System) *checkedSystem {
	w.sysMu.Lock()
	defer w.sysMu.Unlock()
	return w.systems[systemKey(sys)]
}

// Checked reports whether CheckSystems checked sys in this world.
func (w *World) Checked(sys *system.System) bool { return w.checked(sys) != nil }

// schemaKeys are the system file's keys of its two schema files, by side.
var schemaKeys = [2]string{"schema.producer", "schema.consumer"}

// schemaFiles are sys's two schema files, by side ("" none).
func schemaFiles(sys *system.System) [2]string {
	return [2]string{sys.Schema.Producer, sys.Schema.Consumer}
}

// checkSystem checks one system file on a pair of its own. serrs are the
// file's problems; err is the servers'.
func (w *World) checkSystem(ctx context.Context, sys *system.System) (ck *checkedSystem, serrs diag.Errors, err error) {
	var undo cleanups
	defer func() { err = errors.Join(err, undo.run()) }()
	base := fmt.Sprintf("%s_%s_%d", namePrefix, w.RunID, w.seq.Add(1))
	ck = &checkedSystem{}
	var conns [2]*pgx.Conn
	for side, suffix := range []string{"_p", "_c"} {
		conn, err := w.throwawayDB(ctx, side, base+suffix, &undo)
		if err != nil {
			return nil, nil, err
		}
		conns[side] = conn
		file, key := schemaFiles(sys)[side], schemaKeys[side]
		if file == "" {
			continue
		}
		ddl, err := readSchema(ctx, sys, key, file)
		var invalid *InvalidError
		if errors.As(err, &invalid) {
			return nil, invalid.Errs, nil
		} else if err != nil {
			return nil, nil, err
		}
		ck.ddl[side] = ddl
		if _, err := conn.Exec(ctx, ddl); err != nil {
			return nil, diag.Errors{diag.Errorf(sys.At(key), "schema: %s does not apply to a fresh database: %v", file, err)}, nil
		}
	}
	ck.cat, serrs, err = sys.Check(ctx, conns[0], conns[1])
	if ck.cat == nil {
		ck = nil
	}
	return ck, serrs, err
}

// readSchema reads a system file's schema file (key schema.producer or
// schema.consumer) under ctx, through guardfile: a regular file within
// guardfile.SQL's cap. A file problem is an *InvalidError at the key.
func readSchema(ctx context.Context, sys *system.System, key, path string) (string, error) {
	b, err := guardfile.Read(ctx, path, guardfile.SQL)
	switch {
	case err == nil:
		return string(b), nil
	case ctx.Err() != nil:
		return "", err
	}
	return "", &InvalidError{diag.Errors{diag.Errorf(sys.At(key), "%s: %v", key, err)}}
}

// throwawayDB creates a database on a side's server and connects to it;
// undo closes the connection, then drops the database.
func (w *World) throwawayDB(ctx context.Context, side int, name string, undo *cleanups) (*pgx.Conn, error) {
	if err := w.createDB(ctx, side, name, undo); err != nil {
		return nil, err
	}
	url := w.dbURL(side, name)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", name, redact.Err(url, err))
	}
	undo.add(conn.Close)
	return conn, nil
}

// systemsOf lists the system files the scenarios use, each once, in
// scenario order, then those of extra no scenario uses (nil ones left out).
func systemsOf(scs []*scenario.Scenario, extra ...*system.System) []*system.System {
	var out []*system.System
	seen := map[string]bool{}
	add := func(sys *system.System) {
		if sys != nil && !seen[systemKey(sys)] {
			seen[systemKey(sys)] = true
			out = append(out, sys)
		}
	}
	for _, sc := range scs {
		add(sc.System)
	}
	for _, sys := range extra {
		add(sys)
	}
	return out
}

// systemKey names a system file however a scenario reached it: each
// scenario with a system: key loads the file anew.
func systemKey(sys *system.System) string {
	if abs, err := filepath.Abs(sys.File); err == nil {
		return abs
	}
	return sys.File
}
