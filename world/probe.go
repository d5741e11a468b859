package world

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/redact"
)

// DefaultConnectTimeout bounds how long a server given by URL may take to
// answer before the run gives up on it (--connect-timeout).
const DefaultConnectTimeout = 5 * time.Second

// Postgres is Probe's kind for PostgreSQL; the brokers go by their kinds'
// names (broker.Kind.Name).
const Postgres = "postgres"

// pgProbe tells a PostgreSQL: an SSLRequest, which any PostgreSQL (and
// PgBouncer) answers with one byte, S or N.
var pgProbe = broker.Probe{Protocol: "PostgreSQL", Hello: []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}, Need: 1,
	OK:    func(a []byte) bool { return a[0] == 'S' || a[0] == 'N' },
	Addrs: pgAddrs,
	Guess: func(a []byte) string {
		if len(a) == 1 && (a[0] == 'S' || a[0] == 'N') {
			return "a PostgreSQL server"
		}
		return ""
	}}

// probeOf is the probe of a server of kind (Postgres or a broker's name).
func probeOf(kind string) (broker.Probe, bool) {
	if kind == Postgres {
		return pgProbe, true
	}
	k, ok := broker.Lookup(kind)
	if !ok {
		return broker.Probe{}, false
	}
	return k.Probe, true
}

// nudge is written, on a second connection, to a server that stays silent
// after the hello: a server that reads lines (Redis, which also never sees
// a line after the NUL bytes of a PostgreSQL or AMQP hello) or 8 bytes
// (AMQP) then answers, and so a wrong server is named rather than waited out.
var nudge = []byte("PING\r\n\r\n")

const nudgeAfter = 300 * time.Millisecond

// Probe checks, within timeout, that the server at url answers and speaks
// the protocol of kind (Postgres, or a registered broker kind's name: its
// Kind.Probe), so that a wrong --pg or broker URL is an error in
// seconds that names what answered, not a client waiting minutes. Of
// several hosts (a PostgreSQL or NATS list) one answering rightly is
// enough. Over TLS only the connection is checked; a refused connection
// (no hang) is left to the client to report. Errors name the address, never
// the URL (it may hold a password).
func Probe(ctx context.Context, kind, url string, timeout time.Duration) error {
	pr, ok := probeOf(kind)
	if !ok {
		return fmt.Errorf("probe: unknown server kind %q", kind)
	}
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}
	addrs, plain, err := pr.Addrs(url)
	if err != nil || len(addrs) == 0 {
		return nil // the client's own parse error says it better
	}
	if !plain {
		pr.Hello, pr.OK = nil, nil
	}
	var errs []error
	for _, a := range addrs {
		err := probeAddr(ctx, a, pr, timeout)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// CheckURL tells whether url parses as the address of a server of kind
// (Postgres or a broker's name), by the client's own parser, before
// anything connects: a URL that does not is a usage error, not a server
// that failed. The error says what was wanted (the kind's Want) and the
// parser's reason, every secret of url hidden. An empty url (the runner's
// own server) is fine.
func CheckURL(kind, url string) error {
	if url == "" {
		return nil
	}
	if strings.TrimSpace(url) == "" {
		// pgx reads a blank DSN as libpq's defaults (the local socket, as
		// the current user): not what a blank variable meant.
		return fmt.Errorf("blank: give a URL, or leave it unset for the runner's own server")
	}
	pr, ok := probeOf(kind)
	if !ok {
		return fmt.Errorf("unknown server kind %q", kind)
	}
	want := "a PostgreSQL URL or DSN"
	if k, ok := broker.Lookup(kind); ok {
		want = k.Want
	}
	if _, _, err := pr.Addrs(url); err != nil {
		return fmt.Errorf("not %s: %w", want, redact.Err(url, err))
	}
	return nil
}

// pgAddrs are the addresses of a PostgreSQL URL or DSN, its fallbacks
// included; the SSLRequest comes before any TLS.
func pgAddrs(url string) ([]broker.Addr, bool, error) {
	if scheme, rest, ok := strings.Cut(url, "://"); ok && strings.HasPrefix(scheme, "postgres") {
		// pgx reads what follows a second @ as the host, and its error then
		// names part of the password: refuse it before anything reads it.
		authority := rest
		if i := strings.IndexAny(rest, "/?#"); i >= 0 {
			authority = rest[:i] // a query's @ (application_name=a@b) is no user info
		}
		if strings.Count(authority, "@") > 1 {
			return nil, false, errors.New("the user info holds an @ that is not percent-encoded (write it %40): part of the password would be taken for the host")
		}
	}
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		return nil, false, err
	}
	var addrs []broker.Addr
	add := func(host string, port uint16) {
		if strings.HasPrefix(host, "/") {
			addrs = append(addrs, broker.Addr{Network: "unix", Addr: filepath.Join(host, ".s.PGSQL."+strconv.Itoa(int(port)))})
		} else {
			addrs = append(addrs, broker.Addr{Network: "tcp", Addr: net.JoinHostPort(host, strconv.Itoa(int(port)))})
		}
	}
	add(cfg.Host, cfg.Port)
	for _, f := range cfg.Fallbacks {
		if f.Host != cfg.Host || f.Port != cfg.Port {
			add(f.Host, f.Port)
		}
	}
	return addrs, true, nil
}

// errRefused: the dial failed at once (refused, no such host).
var errRefused = errors.New("refused")

// reply is what one probe connection read.
type reply struct {
	data   []byte
	err    error
	nudged bool // the second connection, nudged
}

func probeAddr(ctx context.Context, a broker.Addr, pr broker.Probe, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	p := &prober{ctx: ctx, dctx: dctx, deadline: deadline, a: a, pr: pr, replies: make(chan reply, 2),
		noAnswer: fmt.Errorf("%s gave no answer within %s; is a %s server there? (--connect-timeout to wait longer)", a.Addr, timeout, pr.Protocol)}
	conn, err := p.dial(pr.Hello)
	if err == errRefused {
		return nil // no hang: the client says it, with its URL
	}
	if err != nil {
		return err
	}
	if pr.OK == nil {
		conn.Close()
		return nil // TLS: the connection is all we check
	}
	go p.read(conn, false)
	return p.wait()
}

// prober is one probe of one address: the hello's connection, and a
// second one that nudges a server which speaks only when spoken to.
type prober struct {
	ctx, dctx context.Context // the run's; the probe's, ending at deadline
	deadline  time.Time
	a         broker.Addr
	pr        broker.Probe
	noAnswer  error
	replies   chan reply
}

// dial connects and writes write (nil: nothing), the connection bounded by
// the probe's deadline and closed on Ctrl-C.
func (p *prober) dial(write []byte) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(p.dctx, p.a.Network, p.a.Addr)
	switch {
	case err != nil && p.ctx.Err() != nil:
		return nil, p.ctx.Err()
	case err != nil && p.dctx.Err() != nil:
		return nil, p.noAnswer
	case err != nil:
		return nil, errRefused
	}
	context.AfterFunc(p.dctx, func() { _ = conn.SetDeadline(time.Now()) }) // Ctrl-C
	_ = conn.SetDeadline(p.deadline)
	if write != nil {
		_, _ = conn.Write(write) // a write error shows as the read's
	}
	return conn, nil
}

// read sends what conn answers once it is enough to judge (or, nudged,
// anything at all), or its error.
func (p *prober) read(conn net.Conn, nudged bool) {
	defer conn.Close()
	var data []byte
	buf := make([]byte, 64)
	for {
		n, err := conn.Read(buf)
		data = append(data, buf[:n]...)
		if err != nil || len(data) >= p.pr.Need || nudged && len(data) > 0 {
			p.replies <- reply{data, err, nudged}
			return
		}
	}
}

// judge says whether r is the answer of a server of the probe's kind.
func (p *prober) judge(r reply) error {
	var ne net.Error
	switch {
	case p.ctx.Err() != nil:
		return p.ctx.Err()
	case len(r.data) >= p.pr.Need && p.pr.OK(r.data):
		return nil
	case len(r.data) > 0:
		return fmt.Errorf("%s does not speak the %s protocol: it answered %s", p.a.Addr, p.pr.Protocol, describe(r.data))
	case errors.As(r.err, &ne) && ne.Timeout():
		return p.noAnswer
	}
	return fmt.Errorf("%s does not speak the %s protocol: it closed the connection without a reply", p.a.Addr, p.pr.Protocol)
}

// wait judges the first answer; a server silent for nudgeAfter is nudged
// on a second connection, whose answer waits a moment for the first's.
func (p *prober) wait() error {
	timer := time.NewTimer(nudgeAfter)
	defer timer.Stop()
	var late *reply // the nudged answer, waiting a moment for the first
	nudging := false
	for {
		select {
		case r := <-p.replies:
			switch {
			case !r.nudged && late != nil && len(r.data) == 0:
				return p.judge(*late)
			case !r.nudged:
				return p.judge(r)
			case len(r.data) > 0 && late == nil:
				if p.judge(r) == nil {
					return nil
				}
				// A right but slow server may still answer the first.
				late = &r
				timer.Reset(nudgeAfter)
			}
		case <-timer.C:
			switch {
			case late != nil:
				return p.judge(*late)
			case !nudging:
				nudging = true
				if conn2, err := p.dial(nudge); err == nil {
					go p.read(conn2, true)
				}
			}
		}
	}
}

// describe quotes the start of an answer and guesses who gave it: a
// server of a kind the runner knows (its probe's Guess), or another.
func describe(a []byte) string {
	a = bytes.TrimRight(a, "\x00")
	guess := ""
	if g := guessServer(a); g != "" {
		guess = " (" + g + "?)"
	}
	const max = 40
	if len(a) > max {
		return fmt.Sprintf("%q…%s", a[:max], guess)
	}
	return fmt.Sprintf("%q%s", a, guess)
}

// guessServer names the server that answered a, or "".
func guessServer(a []byte) string {
	probes := []broker.Probe{pgProbe}
	for _, k := range broker.Kinds() {
		probes = append(probes, k.Probe)
	}
	for _, pr := range probes {
		if pr.Guess == nil {
			continue
		}
		if g := pr.Guess(a); g != "" {
			return g
		}
	}
	switch {
	case bytes.HasPrefix(a, []byte("HTTP/")):
		return "an HTTP server"
	case bytes.HasPrefix(a, []byte("SSH-")):
		return "an SSH server"
	}
	return ""
}
