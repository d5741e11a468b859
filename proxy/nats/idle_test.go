package nats

import (
	"fmt"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/outboxdrill/runner/proxy/fault"
)

// puller is a pull consumer driven by hand through the proxy: its pull
// requests on one inbox, as nats.js's consume() sends them.
type puller struct {
	f     *fixture
	nc    *natsgo.Conn
	inbox *natsgo.Subscription
	next  string
}

func (f *fixture) puller(consumer string) *puller {
	f.t.Helper()
	nc, _ := f.client()
	sub, err := nc.SubscribeSync(natsgo.NewInbox())
	if err != nil {
		f.t.Fatal(err)
	}
	return &puller{f: f, nc: nc, inbox: sub, next: fmt.Sprintf("$JS.API.CONSUMER.MSG.NEXT.%s.%s", f.stream, consumer)}
}

// pull sends a pull request (its JSON) and flushes it through.
func (p *puller) pull(req string) {
	p.f.t.Helper()
	if err := p.nc.PublishRequest(p.next, p.inbox.Subject, []byte(req)); err != nil {
		p.f.t.Fatal(err)
	}
	p.flush()
}

// ack sends an ack payload (+ACK, -NAK, +WPI, +TERM) to m's $JS.ACK
// subject and flushes it through.
func (p *puller) ack(m *natsgo.Msg, kind string) {
	p.f.t.Helper()
	if err := p.nc.Publish(m.Reply, []byte(kind)); err != nil {
		p.f.t.Fatal(err)
	}
	p.flush()
}

func (p *puller) flush() {
	p.f.t.Helper()
	if err := p.nc.Flush(); err != nil { // a PING answered: what came before reached the server
		p.f.t.Fatal(err)
	}
}

// receive is the next message on the inbox: a delivery, or a status
// (want says which: "msg", or the status code). An idle heartbeat (100)
// not asked for is passed over: an open pull's may come any time.
func (p *puller) receive(want string) *natsgo.Msg {
	p.f.t.Helper()
	for {
		m, err := p.inbox.NextMsg(10 * time.Second)
		if err != nil {
			p.f.t.Fatalf("waiting for %s: %v", want, err)
		}
		got := "msg"
		if s := m.Header.Get("Status"); s != "" {
			got = s
		}
		switch {
		case got == want:
			return m
		case got != "100":
			p.f.t.Fatalf("got %s (%q), want %s", got, m.Data, want)
		}
	}
}

// idle checks what IdlePoll says now: want an idle poll, and then no
// earlier than since (the moment read, not a past send time).
func (p *puller) idle(what string, want bool) {
	p.f.t.Helper()
	before := time.Now()
	got := p.f.proxy.IdlePoll()
	if want && got.Before(before) || !want && !got.IsZero() {
		p.f.t.Fatalf("%s: IdlePoll %v (read at %v), want idle %v", what, got, before, want)
	}
}

// The proxy tells an idle poll only while a client asked for new work
// holding no delivery it had not settled, and got none since: never
// while a delivery is unacked or in progress (+WPI), never after a pull
// sent while holding one until the server said it has nothing for it (a
// 408, an idle heartbeat), never after any delivery until the next ask.
func TestIdlePollIsAPullThatGotNothingWithNothingHeld(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.consumer("w", time.Minute)
	p := f.puller("w")
	p.idle("before any pull", false)
	p.pull(`{"batch":1,"no_wait":true}`)
	p.receive("404")
	p.idle("a no_wait pull answered 404 No Messages", true)

	for _, ev := range []string{"e1", "e2"} {
		if _, err := f.publish(f.direct, ev); err != nil {
			t.Fatal(err)
		}
	}
	p.pull(`{"batch":2,"expires":5000000000}`)
	m1, m2 := p.receive("msg"), p.receive("msg")
	p.idle("two deliveries held", false)
	p.ack(m1, "+ACK")
	p.idle("one delivery of two acked", false)
	// A prefetch: asking for more while still holding e2. The server's
	// 408 says it has nothing for that pull, but e2 is still in hand.
	p.pull(`{"batch":1,"expires":300000000}`)
	p.idle("a pull sent while holding a delivery", false)
	p.ack(m2, "+WPI")
	p.receive("408")
	p.idle("a 408 while the delivery is still in progress (+WPI)", false)
	p.ack(m2, "+ACK")
	p.idle("all acked, but the last ask was made holding one", false)

	// A pull of two gets e3, which is acked: the pull stays open, and its
	// idle heartbeat says nothing more came for it.
	if _, err := f.publish(f.direct, "e3"); err != nil {
		t.Fatal(err)
	}
	p.pull(`{"batch":2,"expires":10000000000,"idle_heartbeat":100000000}`)
	p.ack(p.receive("msg"), "+ACK")
	p.receive("100")
	p.idle("an idle heartbeat on the open pull, nothing held", true)

	// The open pull gets e4: work again. A -NAK settles it, but the pull
	// that got it was answered: no ask since.
	if _, err := f.publish(f.direct, "e4"); err != nil {
		t.Fatal(err)
	}
	m4 := p.receive("msg")
	p.idle("a delivery on the open pull", false)
	p.ack(m4, "-NAK")
	p.idle("naked, nothing asked since the delivery", false)
	p.pull(`{"batch":1,"expires":5000000000}`)
	m4 = p.receive("msg") // JetStream delivers it again at once
	p.idle("the naked message delivered again", false)
	p.ack(m4, "+TERM")
	p.idle("termed, nothing asked since the delivery", false)
	p.pull(`{"batch":1,"expires":200000000}`)
	p.idle("then a pull with nothing held", true)
	p.receive("408")
	p.idle("the pull expired (408), nothing held", true)

	// A pull the server refuses (409: e6 is larger than its max_bytes)
	// answers no "none"; +NXT acks and asks for the next one.
	if _, err := f.publish(f.direct, "e5"); err != nil {
		t.Fatal(err)
	}
	p.pull(`{"batch":1,"expires":5000000000}`)
	m5 := p.receive("msg")
	p.pull(`{"batch":1,"expires":5000000000,"max_bytes":1}`)
	p.ack(m5, "+ACK")
	if _, err := f.publish(f.direct, "e6"); err != nil {
		t.Fatal(err)
	}
	p.receive("409")
	p.idle("a pull refused (409), sent while holding a delivery", false)
	p.pull(`{"batch":1,"expires":5000000000}`)
	m6 := p.receive("msg")
	p.idle("e6 held", false)
	if err := p.nc.PublishRequest(m6.Reply, p.inbox.Subject, []byte("+NXT")); err != nil {
		t.Fatal(err)
	}
	p.flush()
	p.idle("+NXT: acked, and asked for the next one", true)
}

// A delivery a fault kept from the client (an error in its place, or its
// connection cut) takes the evidence back (the pull was answered), and is
// not held: the client never saw it, so a pull with nothing held after it
// is an idle poll again.
func TestIdlePollAfterADeliveryKeptFromTheClient(t *testing.T) {
	t.Parallel()
	for _, do := range []fault.Do{fault.Error, fault.Cut} {
		f := newFixture(t)
		f.consumer("w", 200*time.Millisecond)
		p := f.puller("w")
		kept := f.arm(Trigger{Boundary: Reply, Op: OpDeliver, Action: fault.Action{Do: do}})
		p.pull(`{"batch":1,"expires":5000000000}`)
		p.idle(fmt.Sprintf("%s: a pull with nothing held", do), true)
		if _, err := f.publish(f.direct, "e1"); err != nil {
			t.Fatal(err)
		}
		<-kept.Done()
		p.idle(fmt.Sprintf("%s: the pull answered with a delivery the drill kept from the client", do), false)
		if do == fault.Cut {
			p = f.puller("w") // connects again, as a client that reconnects
		}
		p.pull(`{"batch":1,"expires":5000000000}`)
		p.idle(fmt.Sprintf("%s: a pull after it, nothing held", do), true)
		m := p.receive("msg") // once AckWait ran out, again
		p.idle(fmt.Sprintf("%s: the redelivery held", do), false)
		p.ack(m, "+ACK")
		p.idle(fmt.Sprintf("%s: acked, nothing asked since", do), false)
		p.pull(`{"batch":1,"expires":5000000000}`)
		p.idle(fmt.Sprintf("%s: then a pull with nothing held", do), true)
	}
}

// A delivery the duplicate fault hands the client twice is held until the
// client settled both copies: a pull after the first ack alone is no idle
// poll.
func TestIdlePollAfterADuplicatedDelivery(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.consumer("w", 10*time.Second)
	p := f.puller("w")
	dup := f.arm(Trigger{Boundary: Reply, Op: OpDeliver, Action: fault.Action{Do: fault.Duplicate}})
	p.pull(`{"batch":1,"expires":5000000000}`)
	if _, err := f.publish(f.direct, "e1"); err != nil {
		t.Fatal(err)
	}
	<-dup.Done()
	first, second := p.receive("msg"), p.receive("msg")
	p.ack(first, "+ACK")
	p.pull(`{"batch":1,"expires":5000000000}`)
	p.idle("one copy of two acked, then a pull", false)
	p.ack(second, "+ACK")
	p.pull(`{"batch":1,"expires":5000000000}`)
	p.idle("both copies acked, then a pull", true)
}
