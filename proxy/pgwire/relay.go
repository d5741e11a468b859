package pgwire

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/proxy/listen"
)

// written lists the tables the current transaction wrote, with their
// inserted+updated+deleted row counts, as the server counts them.
const written = `SELECT schemaname || '.' || relname, n_tup_ins + n_tup_upd + n_tup_del
FROM pg_catalog.pg_stat_xact_user_tables WHERE n_tup_ins + n_tup_upd + n_tup_del > 0`

// fail aborts the open transaction on the server from inside, so that the
// client's COMMIT really rolls back.
const fail = `DO $outboxdrill$ BEGIN RAISE EXCEPTION USING ERRCODE = '40001', MESSAGE = 'outboxdrill: the drill fails this transaction'; END $outboxdrill$`

// injected is the error the client gets in place of the reply the fault
// failed.
func injected(what string) []byte {
	b, _ := (&pgproto3.ErrorResponse{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: InjectedSQLState,
		Message: "outboxdrill: the drill's fault failed this " + what + "; the server rolled the transaction back"}).Encode(nil)
	return b
}

// fromClient reads the client's messages, keeps an extended-protocol batch
// until its Sync (or Flush), and hands each batch to dispatch.
func (c *conn) fromClient() {
	defer c.close()
	for {
		msg, err := c.be.Receive()
		// The client is done (pgproto3 says so as an unexpected EOF, also
		// between messages): the answers to what it sent still come.
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			c.serverMu.Lock()
			s := c.server
			c.serverMu.Unlock()
			listen.ShutWrite(s, c.done)
			return
		}
		if err != nil {
			c.refuseLarge(err)
			return
		}
		b, err := msg.Encode(nil)
		if err != nil {
			return
		}
		if _, bye := msg.(*pgproto3.Terminate); bye {
			c.send(nil, b)
			return
		}
		ok := c.handle(msg, b)
		if ok && len(c.batch) > c.p.lim.MaxBatch {
			ok = c.flushed(c.batch, "of more than "+size(c.p.lim.MaxBatch)+" before its Sync")
		}
		if ok {
			ok = c.settleBatch()
		}
		c.fr.handled()
		if !ok {
			return
		}
	}
}

// handle takes one message of the client's (b, encoded): a simple query
// goes at once; the extended protocol's messages join the batch its Sync
// sends. !ok: the connection is over.
func (c *conn) handle(msg pgproto3.FrontendMessage, b []byte) (ok bool) {
	switch msg := msg.(type) {
	case *pgproto3.Query:
		return c.dispatch(statements(msg.String), true, b)
	case *pgproto3.FunctionCall:
		return c.send(&reply{}, b)
	case *pgproto3.Parse:
		c.track(c.stmts, msg.Name, msg.Query)
	case *pgproto3.Bind:
		c.track(c.portals, msg.DestinationPortal, c.stmts[msg.PreparedStatement])
	case *pgproto3.Execute:
		c.execs = append(c.execs, c.portals[msg.Portal])
	case *pgproto3.Close:
		if msg.ObjectType == 'S' {
			c.untrack(c.stmts, msg.Name)
		} else {
			c.untrack(c.portals, msg.Name)
		}
	case *pgproto3.Sync:
		return c.sync(b)
	case *pgproto3.Flush:
		// The client wants output before its Sync: send what there
		// is; the batch can no longer be held whole.
		return c.flushed(append(c.batch, b...), "flushed before its Sync")
	case *pgproto3.CopyData, *pgproto3.CopyDone, *pgproto3.CopyFail:
		// COPY FROM STDIN: the reply was queued with its query.
		ok = c.send(nil, append(c.batch, b...))
		c.batch = nil
		return ok
	}
	// Parse, Bind, Execute, Close, Describe: held until the Sync.
	c.batch = append(c.batch, b...)
	return true
}

// sync sends an extended batch with its Sync (b), the reply queued for it
// to strike a trigger on, unless it is queued already or cannot be known.
func (c *conn) sync(b []byte) (ok bool) {
	batch, execs := append(c.batch, b...), c.execs
	c.batch, c.execs = nil, nil
	switch {
	case c.unsync: // its reply is queued already
		ok = c.send(nil, batch)
	case c.forgot && len(execs) > 0:
		c.p.failWaiting(&fault.Unclassifiable{Reason: "a connection prepared more than " + size(c.p.lim.MaxPrepared) + " of statements and portals: the proxy no longer knows what its Executes run"}, fault.Commit, fault.Statement)
		ok = c.send(&reply{}, batch)
	default:
		ok = c.dispatch(execs, false, batch)
	}
	c.unsync = false
	return ok
}

// flushed sends the part of an extended batch before a Flush (or past
// Limits.MaxBatch: why says which); the reply is queued once per batch,
// since only its Sync ends it.
func (c *conn) flushed(b []byte, why string) bool {
	if slices.ContainsFunc(c.execs, isCommit) {
		c.p.failWaiting(&fault.Unclassifiable{Reason: "a COMMIT in an extended-protocol batch " + why}, fault.Commit)
	}
	if len(c.execs) > 0 {
		c.p.failWaiting(&fault.Unclassifiable{Reason: "statements in an extended-protocol batch " + why + ": the proxy cannot snapshot around them"}, fault.Statement)
	}
	var r *reply
	if !c.unsync {
		r = &reply{}
	}
	// The Executes sent are accounted for: their triggers failed, and
	// the batch's Sync will not dispatch them.
	c.batch, c.execs, c.unsync = nil, nil, true
	return c.send(r, b)
}

// dispatch sends one batch (a simple query's statements, or the SQL of an
// extended batch's Executes) with what the armed triggers need around it.
func (c *conn) dispatch(sqls []string, simple bool, b []byte) bool {
	r := &reply{}
	if !c.flushStats() {
		return false
	}
	commits := 0
	for _, s := range sqls {
		if isCommit(s) {
			commits++
		}
	}
	switch {
	case commits > 0 && len(sqls) > 1:
		kind := "an extended-protocol batch"
		if simple {
			kind = "a multi-statement simple query"
		}
		c.p.failWaiting(&fault.Unclassifiable{Reason: fmt.Sprintf("a COMMIT inside %s of %d statements: its reply cannot be held alone", kind, len(sqls))}, fault.Commit, fault.Statement)
	case commits == 1:
		if !c.beforeCommit(r) {
			return false
		}
	case c.status.Load() == 'I' && c.p.waiting(fault.Commit) != nil && !slices.ContainsFunc(sqls, isBegin) && !slices.ContainsFunc(sqls, outsideTx):
		return c.sendWrapped(r, b)
	default:
		if c.p.waiting(fault.Statement) != nil {
			return c.sendHeld(r, b)
		}
	}
	return c.send(r, b)
}

// sendWrapped runs a batch sent outside a transaction block (autocommit:
// its own implicit transaction commits as it ends) inside a transaction of
// the proxy's, so that its commit is a boundary the proxy can hold: the
// proxy learns what the batch wrote, then commits (or rolls back) itself
// and answers as the implicit transaction would have.
func (c *conn) sendWrapped(r *reply, b []byte) bool {
	if c.own("BEGIN") == nil {
		return false
	}
	after := &reply{own: true, ready: make(chan struct{})}
	r.stmt = &stmtHold{after: after, implicit: true, released: make(chan struct{})}
	q, _ := (&pgproto3.Query{String: written}).Encode(nil)
	if !c.send(r, b) || !c.send(after, q) {
		return false
	}
	// A barrier: what the client pipelines next must not run inside the
	// proxy's transaction.
	select {
	case <-r.stmt.released:
		return true
	case <-c.done:
		return false
	}
}

// outsideTx reports whether a statement cannot run inside a transaction
// block (PostgreSQL refuses it there), so it is never wrapped: it commits
// as it runs, as a boundary the proxy does not hold.
func outsideTx(stmt string) bool {
	f := strings.Fields(strings.ToUpper(stmt))
	if len(f) == 0 {
		return false
	}
	switch f[0] {
	case "VACUUM", "CHECKPOINT":
		return true
	case "CREATE", "DROP", "ALTER", "REINDEX":
		return slices.Contains(f, "DATABASE") || slices.Contains(f, "TABLESPACE") || slices.Contains(f, "CONCURRENTLY") ||
			slices.Contains(f, "SYSTEM") || slices.Contains(f, "SUBSCRIPTION")
	}
	return false
}

// isBegin reports whether a statement opens a transaction block.
func isBegin(stmt string) bool {
	f := strings.Fields(strings.ToUpper(stmt))
	return len(f) > 0 && (f[0] == "BEGIN" || f[0] == "START")
}

// flushStats makes the server flush this backend's pending table
// statistics before a batch that may begin a transaction, while a trigger
// is armed. pg_stat_xact_user_tables counts what the open transaction
// wrote PLUS what earlier transactions of the backend wrote and the server
// has not flushed yet (up to a second's worth); after a forced flush at
// the idle point before the transaction begins, it counts that transaction
// alone. pg_stat_force_next_flush is PostgreSQL 15's.
func (c *conn) flushStats() bool {
	if c.status.Load() != 'I' || len(c.p.waiting(fault.Commit))+len(c.p.waiting(fault.Statement)) == 0 {
		return true
	}
	if c.major < 15 {
		c.p.failWaiting(&fault.Unclassifiable{Reason: fmt.Sprintf("PostgreSQL %d cannot tell a transaction's writes from its predecessors' unflushed ones (pg_stat_force_next_flush is 15's)", c.major)}, fault.Commit, fault.Statement)
		return true
	}
	return c.own("SELECT pg_catalog.pg_stat_force_next_flush()") != nil
}

// sendHeld sends a batch between two snapshots of what the transaction
// wrote; fromServer holds its reply until the second one is in.
func (c *conn) sendHeld(r *reply, b []byte) bool {
	var before *reply // outside a transaction block: nothing written yet
	if c.status.Load() == 'T' {
		if before = c.own(written); before == nil {
			return false
		}
	}
	after := &reply{own: true, ready: make(chan struct{})}
	r.stmt = &stmtHold{before: before, after: after}
	q, _ := (&pgproto3.Query{String: written}).Encode(nil)
	return c.send(r, b) && c.send(after, q)
}

// beforeCommit asks the server, inside the transaction, what it wrote, and
// arms the reply to this COMMIT when a trigger matches.
func (c *conn) beforeCommit(r *reply) bool {
	waiting := c.p.waiting(fault.Commit)
	if len(waiting) == 0 {
		c.p.record(Event{Conn: c.id, Boundary: fault.Commit})
		return true
	}
	snap, ok := c.ask(written)
	if !ok {
		return false
	}
	if snap.status != 'T' {
		return true // no transaction block (or a failed one): no commit to strike
	}
	tables := names(snap.rows)
	for _, a := range waiting {
		if a.Trigger.Wrote(tables) && a.Take() {
			r.commit = a
			break
		}
	}
	e := Event{Conn: c.id, Boundary: fault.Commit, Tables: tables}
	if r.commit != nil {
		e.Fault = r.commit.Trigger.String()
	}
	c.p.record(e)
	if r.commit != nil && r.commit.Do == fault.Error {
		r.rollback = true
		return c.own(fail) != nil
	}
	return true
}

func names(rows [][]string) []string {
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		out = append(out, r[0])
	}
	slices.Sort(out)
	return out
}

// grew lists the tables whose write count grew from before to after.
func grew(before, after [][]string) []string {
	was := map[string]int64{}
	for _, r := range before {
		was[r[0]], _ = strconv.ParseInt(r[1], 10, 64)
	}
	var out []string
	for _, r := range after {
		if n, _ := strconv.ParseInt(r[1], 10, 64); n > was[r[0]] {
			out = append(out, r[0])
		}
	}
	slices.Sort(out)
	return out
}

// fromServer reads the server's messages and gives each to the reply it
// belongs to: the proxy's own queries are swallowed, a held reply waits,
// a struck reply never reaches the client.
func (c *conn) fromServer() {
	defer c.close()
	var cur, held *reply
	for {
		msg, err := c.fe.Receive()
		if err != nil {
			var body *pgproto3.ExceededMaxBodyLenErr
			if errors.As(err, &body) {
				c.outMu.Lock()
				if !c.refused {
					c.refused = true
					c.refuse(limitSQLState, (&tooLarge{from: "server", n: body.ActualBodyLen, cap: c.p.lim.MaxMessage}).Error())
				}
				c.outMu.Unlock()
			}
			return
		}
		switch msg.(type) {
		case *pgproto3.CopyBothResponse:
			c.streaming.Store(true)
		case *pgproto3.ParameterStatus, *pgproto3.NotificationResponse:
			if !c.toClient(func() bool { c.be.Send(msg); return c.flushIfIdle() == nil }) {
				return
			}
			continue
		}
		if cur == nil {
			select {
			case cur = <-c.pending:
			case <-c.done:
				return
			}
		}
		rfq, isRFQ := msg.(*pgproto3.ReadyForQuery)
		if isRFQ {
			c.status.Store(uint32(rfq.TxStatus))
			cur.status = rfq.TxStatus
		}
		ok := c.toClient(func() bool {
			switch {
			case cur.own:
				return c.ownReply(cur, msg, &held)
			case cur.stmt != nil:
				if isRFQ {
					held = cur
				}
				return c.hold(cur, msg, isRFQ)
			}
			return c.clientReply(cur, msg)
		})
		if !ok {
			return
		}
		if isRFQ {
			cur = nil
			c.clock.Paid()
		}
	}
}

// toClient runs what fromServer does with one message under outMu: not
// at all once a refusal was sent.
func (c *conn) toClient(f func() bool) bool {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	return !c.refused && f()
}

// hold keeps one message of a reply a statement trigger waits for, up to
// Limits.MaxHeldReply; past it, the reply goes on to the client as it comes but
// for its ReadyForQuery (an implicit transaction's is rewritten at its
// end), and cannot be struck.
func (c *conn) hold(r *reply, msg pgproto3.BackendMessage, isRFQ bool) bool {
	if r.spilled && !isRFQ {
		c.be.Send(msg)
		return c.flushIfIdle() == nil
	}
	b, _ := msg.Encode(nil)
	r.held, r.heldBytes = append(r.held, b), r.heldBytes+len(b)
	if r.spilled || isRFQ || r.heldBytes <= c.p.lim.MaxHeldReply {
		return true
	}
	r.spilled = true
	held := r.held
	r.held, r.heldBytes = nil, 0
	return c.raw(held...)
}

// flushIfIdle sends the client what is buffered once the server has
// nothing more buffered for us: one write per burst, not per message.
func (c *conn) flushIfIdle() error {
	if c.fe.ReadBufferLen() > 0 {
		return nil
	}
	return c.be.Flush()
}

// ownReply records the proxy's own query's rows; when it is the snapshot
// a held reply waits for, resolves that reply.
func (c *conn) ownReply(r *reply, msg pgproto3.BackendMessage, held **reply) bool {
	switch msg := msg.(type) {
	case *pgproto3.DataRow:
		row := make([]string, len(msg.Values))
		for i, v := range msg.Values {
			row[i] = string(v)
		}
		r.rows = append(r.rows, row)
	case *pgproto3.ErrorResponse:
		r.failed = true
	case *pgproto3.ReadyForQuery:
		close(r.ready)
		h := *held
		switch {
		case h != nil && h.stmt.after == r && h.stmt.implicit:
			return c.resolve(h) // held until its fin
		case h != nil && h.stmt.after == r:
			*held = nil
			return c.resolve(h)
		case h != nil && h.stmt.fin == r:
			*held = nil
			return c.finish(h)
		}
	}
	return true
}

// clientReply forwards one message of a client's reply, striking at the
// COMMIT's CommandComplete when the reply is armed.
func (c *conn) clientReply(r *reply, msg pgproto3.BackendMessage) bool {
	if e, ok := msg.(*pgproto3.ErrorResponse); ok {
		c.p.errs.add(e.Code, e.Message)
	}
	if cc, ok := msg.(*pgproto3.CommandComplete); ok && r.commit != nil {
		a := r.commit
		r.commit = nil
		tag := string(cc.CommandTag)
		switch {
		case r.rollback && tag == "ROLLBACK":
			a.Finish(nil)
			return c.raw(injected("COMMIT"))
		case tag != "COMMIT":
			a.Finish(fmt.Errorf("the server answered the COMMIT with %q: there was no commit to strike", tag))
		default:
			return c.strike(a, func() bool { c.be.Send(msg); return true })
		}
	}
	c.be.Send(msg)
	if _, ok := msg.(*pgproto3.ReadyForQuery); ok {
		return c.be.Flush() == nil
	}
	return c.flushIfIdle() == nil
}

// strike applies a kill, cut or delay with the reply held; pass forwards
// the reply afterwards (delay only).
func (c *conn) strike(a *Armed, pass func() bool) bool {
	return a.Hold(c.done, c.close, pass)
}

// raw writes encoded messages to the client after what is buffered.
func (c *conn) raw(bs ...[]byte) bool {
	if c.be.Flush() != nil {
		return false
	}
	for _, b := range bs {
		if _, err := c.client.Write(b); err != nil {
			return false
		}
	}
	return true
}

// resolve decides a held statement reply once the snapshot after it is in:
// if it wrote a trigger's table, strike; else pass it on unchanged.
func (c *conn) resolve(h *reply) bool {
	if h.stmt.implicit {
		return c.resolveImplicit(h)
	}
	var was [][]string
	if h.stmt.before != nil {
		was = h.stmt.before.rows
	}
	tables := grew(was, h.stmt.after.rows)
	if h.status != 'T' {
		tables = nil // committed or failed already: no open statement to strike
	}
	var a *Armed
	for _, w := range c.p.waiting(fault.Statement) {
		if w.Trigger.Wrote(tables) && h.spilled {
			w.Fail(c.spilledErr())
		} else if w.Trigger.Wrote(tables) && w.Take() {
			a = w
			break
		}
	}
	if len(tables) > 0 {
		e := Event{Conn: c.id, Boundary: fault.Statement, Tables: tables, Command: commandOf(h.held)}
		if a != nil {
			e.Fault = a.Trigger.String()
		}
		c.p.record(e)
	}
	if a == nil {
		return c.raw(h.held...)
	}
	if a.Do != fault.Error {
		return c.strike(a, func() bool { return c.raw(h.held...) })
	}
	// The statement ran; abort its transaction on the server for real and
	// tell the client its statement failed.
	if c.own(fail) == nil {
		return false
	}
	a.Finish(nil)
	return c.raw(failStatement(h.held)...)
}

// spilledErr is why a trigger on a reply over Limits.MaxHeldReply failed.
func (c *conn) spilledErr() error {
	return &fault.Unclassifiable{Reason: "a reply of more than " + size(c.p.lim.MaxHeldReply) + ": the proxy passed it on as it came instead of holding it"}
}

// commandOf is the command of a held reply's last CommandComplete: its
// tag's first word ("INSERT 0 1" is INSERT), "" without one.
func commandOf(held [][]byte) string {
	cmd := ""
	for _, b := range held {
		if len(b) > 5 && b[0] == 'C' {
			tag, _, _ := strings.Cut(string(b[5:]), "\x00")
			cmd, _, _ = strings.Cut(tag, " ")
		}
	}
	return cmd
}

// failStatement rewrites a held reply: its last CommandComplete becomes
// the injected error, and the transaction is reported failed ('E').
func failStatement(held [][]byte) [][]byte {
	last := -1
	for i, b := range held {
		if b[0] == 'C' {
			last = i
		}
	}
	out := slices.Clone(held[:max(last, 0)])
	out = append(out, injected("statement"))
	rfq, _ := (&pgproto3.ReadyForQuery{TxStatus: 'E'}).Encode(nil)
	return append(out, rfq)
}

// String names the connection in errors.
func (c *conn) String() string {
	return "pgwire conn " + strconv.Itoa(c.id) + " " + strings.TrimSpace(c.p.upstream)
}

// resolveImplicit ends the proxy's transaction around a batch the client
// sent in autocommit: a batch that failed is rolled back; one that wrote a
// commit trigger's table strikes at its commit; any other commits. The
// client's reply waits for the proxy's COMMIT (see finish).
func (c *conn) resolveImplicit(h *reply) bool {
	tables := grew(nil, h.stmt.after.rows)
	end := "COMMIT"
	if h.status != 'T' {
		end, tables = "ROLLBACK", nil
	}
	for _, w := range c.p.waiting(fault.Commit) {
		if len(tables) > 0 && w.Trigger.Wrote(tables) && h.spilled {
			w.Fail(c.spilledErr())
		} else if len(tables) > 0 && w.Trigger.Wrote(tables) && w.Take() {
			h.stmt.strike = w
			break
		}
	}
	if len(tables) > 0 {
		e := Event{Conn: c.id, Boundary: fault.Commit, Tables: tables}
		if h.stmt.strike != nil {
			e.Fault = h.stmt.strike.Trigger.String()
		}
		c.p.record(e)
	}
	if h.stmt.strike != nil && h.stmt.strike.Do == fault.Error {
		end = "ROLLBACK"
	}
	h.stmt.fin = c.own(end)
	return h.stmt.fin != nil
}

// finish passes a wrapped batch's reply once the proxy's COMMIT or
// ROLLBACK is in, as the implicit transaction would have ended: out of a
// transaction block ('I').
func (c *conn) finish(h *reply) bool {
	defer close(h.stmt.released)
	held := h.held
	if n := len(held); n > 0 && held[n-1][0] == 'Z' {
		held[n-1] = []byte{'Z', 0, 0, 0, 5, 'I'}
	}
	a := h.stmt.strike
	switch {
	case a != nil && a.Do == fault.Error:
		a.Finish(nil)
		out := failStatement(held)
		out[len(out)-1] = []byte{'Z', 0, 0, 0, 5, 'I'}
		return c.raw(out...)
	case h.stmt.fin.failed: // the commit itself failed (a deferred constraint): say so
		if a != nil {
			a.Finish(fmt.Errorf("the commit failed on the server: nothing to strike"))
		}
		out := failStatement(held)
		out[len(out)-1] = []byte{'Z', 0, 0, 0, 5, 'I'}
		return c.raw(out...)
	case a != nil:
		return c.strike(a, func() bool { return c.raw(held...) })
	}
	return c.raw(held...)
}
