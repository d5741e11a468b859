package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/kafka"
	"github.com/outboxdrill/runner/internal/redact"
)

// DefaultConnectTimeout bounds how long a server given by URL may take to
// answer before the run gives up on it (--connect-timeout).
const DefaultConnectTimeout = 5 * time.Second

// Postgres is Probe's kind for PostgreSQL; the brokers go by their names
// (broker.Redis, broker.NATS, broker.RabbitMQ).
const Postgres = "postgres"

// protocol is how Probe tells a server of one kind: what it says first (nil:
// the server speaks first, as NATS does) and what a right answer starts with.
type protocol struct {
	name  string // for messages
	hello []byte
	need  int // bytes of the answer ok judges
	ok    func(answer []byte) bool
}

var protocols = map[string]protocol{
	// SSLRequest: any PostgreSQL (and PgBouncer) answers one byte, S or N.
	Postgres: {"PostgreSQL", []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}, 1,
		func(a []byte) bool { return a[0] == 'S' || a[0] == 'N' }},
	// PING: +PONG, or an error such as -NOAUTH: a Redis either way.
	broker.Redis: {"Redis", []byte("PING\r\n"), 1,
		func(a []byte) bool { return a[0] == '+' || a[0] == '-' }},
	broker.NATS: {"NATS", nil, 5,
		func(a []byte) bool { return string(a[:5]) == "INFO " }},
	// The AMQP 0-9-1 header: the answer is a method frame (Connection.Start)
	// on channel 0.
	broker.RabbitMQ: {"RabbitMQ (AMQP 0-9-1)", []byte("AMQP\x00\x00\x09\x01"), 3,
		func(a []byte) bool { return a[0] == 1 && a[1] == 0 && a[2] == 0 }},
	// ApiVersions v0, correlation id 1, no client id: the answer's header
	// (after the 4-byte size) carries the correlation id back.
	broker.Kafka: {"Kafka", []byte{0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 1, 0xff, 0xff}, 8,
		func(a []byte) bool { return a[4] == 0 && a[5] == 0 && a[6] == 0 && a[7] == 1 }},
}

// nudge is written, on a second connection, to a server that stays silent
// after the hello: a server that reads lines (Redis, which also never sees
// a line after the NUL bytes of a PostgreSQL or AMQP hello) or 8 bytes
// (AMQP) then answers, and so a wrong server is named rather than waited out.
var nudge = []byte("PING\r\n\r\n")

const nudgeAfter = 300 * time.Millisecond

// Probe checks, within timeout, that the server at url answers and speaks
// the protocol of kind (Postgres, broker.Redis, broker.NATS,
// broker.RabbitMQ), so that a wrong --pg or broker URL is an error in
// seconds that names what answered, not a client waiting minutes. Of
// several hosts (a PostgreSQL or NATS list) one answering rightly is
// enough. Over TLS only the connection is checked; a refused connection
// (no hang) is left to the client to report. Errors name the address, never
// the URL (it may hold a password).
func Probe(ctx context.Context, kind, url string, timeout time.Duration) error {
	pr, ok := protocols[kind]
	if !ok {
		return fmt.Errorf("probe: unknown server kind %q", kind)
	}
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}
	addrs, plain, err := probeAddrs(kind, url)
	if err != nil || len(addrs) == 0 {
		return nil // the client's own parse error says it better
	}
	if !plain {
		pr.hello, pr.ok = nil, nil
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
// (Postgres, broker.Redis, broker.NATS, broker.RabbitMQ, broker.Kafka), by
// the client's own parser, before anything connects: a URL that does not
// is a usage error, not a server that failed. The error says what was
// wanted and the parser's reason, every secret of url hidden. An empty url
// (the runner's own server) is fine.
func CheckURL(kind, url string) error {
	if url == "" {
		return nil
	}
	want := map[string]string{Postgres: "a PostgreSQL URL or DSN", broker.Redis: "a Redis URL", broker.NATS: "a NATS URL",
		broker.RabbitMQ: "a RabbitMQ URL", broker.Kafka: "HOST:PORT[,HOST:PORT...]"}[kind]
	_, _, err := probeAddrs(kind, url)
	switch {
	case err == nil:
		return nil
	case kind == broker.Kafka: // its message quotes the list, user info and all
		err = errors.New("want host:port, a comma-separated list of them, or kafka://host:port")
	}
	return fmt.Errorf("not %s: %w", want, redact.Err(url, err))
}

type netAddr struct{ network, addr string }

// probeAddrs are the addresses of url, and whether the protocol's first
// bytes are plain (not TLS from the start).
func probeAddrs(kind, url string) (addrs []netAddr, plain bool, err error) {
	tcp := func(host string, port int) netAddr {
		return netAddr{"tcp", net.JoinHostPort(host, strconv.Itoa(port))}
	}
	switch kind {
	case Postgres:
		cfg, err := pgconn.ParseConfig(url)
		if err != nil {
			return nil, false, err
		}
		add := func(host string, port uint16) {
			if strings.HasPrefix(host, "/") {
				addrs = append(addrs, netAddr{"unix", filepath.Join(host, ".s.PGSQL."+strconv.Itoa(int(port)))})
			} else {
				addrs = append(addrs, tcp(host, int(port)))
			}
		}
		add(cfg.Host, cfg.Port)
		for _, f := range cfg.Fallbacks {
			if f.Host != cfg.Host || f.Port != cfg.Port {
				add(f.Host, f.Port)
			}
		}
		return addrs, true, nil // SSLRequest comes before any TLS
	case broker.Redis:
		opt, err := redis.ParseURL(url)
		if err != nil {
			return nil, false, err
		}
		return []netAddr{{opt.Network, opt.Addr}}, opt.TLSConfig == nil, nil
	case broker.NATS:
		plain = true
		for _, u := range strings.Split(url, ",") {
			u = strings.TrimSpace(u)
			if !strings.Contains(u, "://") {
				u = "nats://" + u
			}
			pu, err := neturl.Parse(u)
			if err != nil {
				return nil, false, err
			}
			switch pu.Scheme {
			case "nats", "tls":
			default:
				return nil, false, nil // websocket: the client checks it
			}
			port, _ := strconv.Atoi(pu.Port())
			if port == 0 {
				port = 4222
			}
			addrs = append(addrs, tcp(pu.Hostname(), port)) // INFO comes before TLS
		}
		return addrs, plain, nil
	case broker.RabbitMQ:
		uri, err := amqp.ParseURI(url)
		if err != nil {
			return nil, false, err
		}
		return []netAddr{tcp(uri.Host, uri.Port)}, uri.Scheme == "amqp", nil
	case broker.Kafka:
		seeds, err := kafka.Seeds(url)
		if err != nil {
			return nil, false, err
		}
		for _, s := range seeds {
			addrs = append(addrs, netAddr{"tcp", s})
		}
		return addrs, true, nil
	}
	return nil, false, nil
}

// errRefused: the dial failed at once (refused, no such host).
var errRefused = errors.New("refused")

// reply is what one probe connection read.
type reply struct {
	data   []byte
	err    error
	nudged bool // the second connection, nudged
}

func probeAddr(ctx context.Context, a netAddr, pr protocol, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	noAnswer := fmt.Errorf("%s gave no answer within %s; is a %s server there? (--connect-timeout to wait longer)", a.addr, timeout, pr.name)
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	dial := func(write []byte) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(dctx, a.network, a.addr)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil && dctx.Err() != nil:
			return nil, noAnswer
		case err != nil:
			return nil, errRefused
		}
		context.AfterFunc(dctx, func() { _ = conn.SetDeadline(time.Now()) }) // Ctrl-C
		_ = conn.SetDeadline(deadline)
		if write != nil {
			_, _ = conn.Write(write) // a write error shows as the read's
		}
		return conn, nil
	}
	replies := make(chan reply, 2)
	read := func(conn net.Conn, nudged bool) {
		defer conn.Close()
		var data []byte
		buf := make([]byte, 64)
		for {
			n, err := conn.Read(buf)
			data = append(data, buf[:n]...)
			if err != nil || len(data) >= pr.need || nudged && len(data) > 0 {
				replies <- reply{data, err, nudged}
				return
			}
		}
	}
	conn, err := dial(pr.hello)
	if err == errRefused {
		return nil // no hang: the client says it, with its URL
	}
	if err != nil {
		return err
	}
	if pr.ok == nil {
		conn.Close()
		return nil // TLS: the connection is all we check
	}
	go read(conn, false)
	judge := func(r reply) error {
		var ne net.Error
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case len(r.data) >= pr.need && pr.ok(r.data):
			return nil
		case len(r.data) > 0:
			return fmt.Errorf("%s does not speak the %s protocol: it answered %s", a.addr, pr.name, describe(r.data))
		case errors.As(r.err, &ne) && ne.Timeout():
			return noAnswer
		}
		return fmt.Errorf("%s does not speak the %s protocol: it closed the connection without a reply", a.addr, pr.name)
	}
	timer := time.NewTimer(nudgeAfter)
	defer timer.Stop()
	var late *reply // the nudged answer, waiting a moment for the first
	nudging := false
	for {
		select {
		case r := <-replies:
			switch {
			case !r.nudged && late != nil && len(r.data) == 0:
				return judge(*late)
			case !r.nudged:
				return judge(r)
			case len(r.data) > 0 && late == nil:
				if judge(r) == nil {
					return nil
				}
				// A right but slow server may still answer the first.
				late = &r
				timer.Reset(nudgeAfter)
			}
		case <-timer.C:
			switch {
			case late != nil:
				return judge(*late)
			case !nudging:
				nudging = true
				if conn2, err := dial(nudge); err == nil {
					go read(conn2, true)
				}
			}
		}
	}
}

// describe quotes the start of an answer and guesses who gave it.
func describe(a []byte) string {
	a = bytes.TrimRight(a, "\x00")
	guess := ""
	switch {
	case bytes.HasPrefix(a, []byte("INFO {")):
		guess = " (a NATS server?)"
	case bytes.HasPrefix(a, []byte("AMQP")):
		guess = " (an AMQP server such as RabbitMQ?)"
	case bytes.HasPrefix(a, []byte("HTTP/")):
		guess = " (an HTTP server?)"
	case bytes.HasPrefix(a, []byte("SSH-")):
		guess = " (an SSH server?)"
	case len(a) > 0 && (a[0] == '+' || a[0] == '-') && bytes.HasSuffix(a, []byte("\r\n")):
		guess = " (a Redis server?)"
	case len(a) == 1 && (a[0] == 'S' || a[0] == 'N'):
		guess = " (a PostgreSQL server?)"
	}
	const max = 40
	if len(a) > max {
		return fmt.Sprintf("%q…%s", a[:max], guess)
	}
	return fmt.Sprintf("%q%s", a, guess)
}
