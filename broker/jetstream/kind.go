package jetstream

import (
	"bytes"
	"context"
	"fmt"
	"net"
	neturl "net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/jetstream/natsserver"
	"github.com/outboxdrill/runner/internal/redact"
)

// Kind is NATS JetStream as the runner knows it (broker/kinds registers it).
var Kind = &broker.Kind{
	Name: broker.NATS, Title: "NATS", Product: "NATS JetStream",
	Flag: "nats", Env: "RUNNER_NATS_URL",
	FlagUsage: "the NATS server (JetStream on) at `URL`", Own: "one", Want: "a NATS URL",
	Ports:        map[string]string{"nats": "4222", "tls": "4222"},
	Placeholders: []string{"subject", "stream_name", "group"},
	Probe: broker.Probe{
		Protocol: "NATS", Need: 5, // the server speaks first: INFO {...}
		OK:    func(a []byte) bool { return string(a[:5]) == "INFO " },
		Addrs: probeAddrs,
		Guess: func(a []byte) string {
			if bytes.HasPrefix(a, []byte("INFO {")) {
				return "a NATS server"
			}
			return ""
		},
	},
	Capabilities: capabilities,

	Start:      start,
	Open:       open,
	Dir:        natsserver.Dir,
	Limits:     limits,
	ConsumerID: consumerID,
	Verbs:      broker.Verbs{Publish: "PUB (PubAck)", Read: "pull (CONSUMER.MSG.NEXT)", Ack: "+ACK", Claim: "pull (after AckWait)"},
	Mechanisms: map[broker.Mechanism]string{
		broker.SecondPublish: "dropped inside the stream's duplicate window when Nats-Msg-Id = event id (PubAck.Duplicate); stored again after the window",
		broker.Takeover:      "the server redelivers after AckWait (counted from the delivery, or from the worker's last InProgress) to whichever client pulls next; a claim is such a pull",
		broker.RolledBack:    "Nak: redelivered at once, to the next pull",
		broker.Inspection:    "counts only: NumAckPending, NumRedelivered",
		broker.DeadLetters:   "`broker_dlq`: MaxDeliver + the MAX_DELIVERIES advisory, kept in a stream; beside the application-level DLQ",
		broker.Durability:    "the managed nats-server 2.9 syncs to disk every 2 min (sync_interval needs 2.10); a SIGKILL keeps the page cache, so the drill shows the stream's messages surviving a process crash, not a power loss. A consumer's delivered and acknowledged positions reach its state file in the background: an ack confirmed (double ack) shortly before a SIGKILL can be lost and the message delivered again (seen here within ~0.3 s; at least once, which the inbox deduplicates)",
	},
	Options:    ScenarioOptions{},
	OptionsDoc: "this scenario's JetStream stream",
}

// ScenarioOptions tune a scenario's JetStream stream (its nats: key).
type ScenarioOptions struct {
	MsgID        bool          `param:"msg_id" default:"true" doc:"relay publishes carry Nats-Msg-Id = event id, so the server drops a second publish of an event inside the duplicate window"`
	DedupeWindow time.Duration `param:"dedupe_window" default:"2m" doc:"the stream's duplicate window"`
	AckWait      time.Duration `param:"ack_wait" default:"1s" doc:"how long a delivered, unacknowledged message waits before it is delivered again"`
}

// options are the stream options of scenario sc.
func options(sc broker.Scenario) Options {
	o, ok := sc.Options.(*ScenarioOptions)
	if !ok { // a pair without a scenario: the defaults
		return Options{}
	}
	return Options{Dedupe: o.MsgID, DedupeWindow: o.DedupeWindow, AckWait: o.AckWait, MaxDeliver: sc.DeliveryLimit}
}

// probeAddrs are the servers of a NATS URL list; INFO comes before TLS,
// so every address is plain.
func probeAddrs(url string) ([]broker.Addr, bool, error) {
	var addrs []broker.Addr
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
		addrs = append(addrs, broker.Addr{Network: "tcp", Addr: net.JoinHostPort(pu.Hostname(), strconv.Itoa(port))})
	}
	return addrs, true, nil
}

// start starts the runner's own nats-server.
func start(ctx context.Context, h broker.Host) (string, broker.Process, error) {
	srv, err := natsserver.Start(ctx, natsserver.Options{})
	if err != nil {
		return "", nil, err
	}
	h.DeferStop(srv.Discard)
	h.Logf("started NATS pid %d at %s in %s", srv.PID(), redact.URL(srv.URL()), srv.Dir)
	return srv.URL(), srv, nil
}

// consumerID: a consumer id is the durable pull consumer's name
// (sanitize). nats-server refuses names with whitespace, '.', '*', '>',
// '/' or '\' ("Naming Streams, Consumers, and Accounts",
// https://docs.nats.io/running-a-nats-service/nats_admin/jetstream_admin/naming);
// any other character but A-Z a-z 0-9 '_' '-' the runner rewrites to '_',
// where two ids could meet in one name: so only those are taken.
func consumerID(id string) error {
	for i, r := range id {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			continue
		}
		why := "a NATS JetStream consumer name cannot hold it (nats-server refuses whitespace, '.', '*', '>', '/', '\\' and control characters)"
		if !(r == '.' || r == '*' || r == '>' || r == '/' || r == '\\' || unicode.IsSpace(r)) {
			why = "the runner would rewrite it to '_' in the NATS JetStream consumer name, where two consumer ids could meet"
		}
		return fmt.Errorf("%q at byte %d: %s; on NATS a consumer id takes only A-Z a-z 0-9 _ -", r, i, why)
	}
	if len(id) > 255 {
		return fmt.Errorf("%d bytes: a NATS JetStream consumer name is at most 255 (JSMaxNameLen)", len(id))
	}
	return nil
}
