package amqp

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/outboxdrill/runner/proxy/fault"
)

// Boundary, Request and Reply are fault's (the reply of each operation
// is said at its constant below).
type Boundary = fault.Boundary

const Request, Reply = fault.Request, fault.Reply

// The broker-neutral operations, as every proxy has them.
const (
	// OpPublish is basic.publish; its reply is the publisher confirm
	// (basic.ack or basic.nack from the server) that covers it.
	OpPublish = fault.OpPublish
	// OpDeliver is, at Reply, basic.deliver or basic.get-ok (with its
	// message); at Request, basic.get.
	OpDeliver = fault.OpDeliver
	// OpAck is the client's basic.ack (Request only: AMQP answers no ack).
	OpAck = fault.OpAck
)

// Trigger arms one fault at the Nth crossing of Op: a neutral operation,
// or a method by its name (basic.publish, basic.ack, tx.commit, …).
//
// At Request a method names what the client sends. At Reply it names the
// answer to a client's method (basic.publish: its confirm; a synchronous
// method such as tx.commit or basic.get: its -ok), else a method the
// server sends (basic.deliver, basic.return; basic.ack and basic.nack:
// the server's confirms).
//
// Exchange and RoutingKey match a publish's, a delivery's or a return's;
// Queue the queue a delivery came from (by its consumer or basic.get), a
// basic.get or basic.consume reads, or an ack's delivery came from; a
// publish to the default exchange names its queue as its routing key.
// "" matches any.
//
// Error does not forward the method (or, at a delivery, the message): the
// proxy closes the channel on both sides, the client getting RabbitMQ's
// own kind of channel.close, 406 PRECONDITION_FAILED, naming the method.
type Trigger struct {
	Boundary                    Boundary
	Op                          string
	Exchange, RoutingKey, Queue string
	Nth                         int // 1 = the first; 0 counts as 1
	fault.Action
}

func (t Trigger) String() string {
	var f []string
	for _, kv := range [][2]string{{"exchange", t.Exchange}, {"routing_key", t.RoutingKey}, {"queue", t.Queue}} {
		if kv[1] != "" {
			f = append(f, kv[0]+"="+kv[1])
		}
	}
	filter := ""
	if len(f) > 0 {
		filter = ", " + strings.Join(f, ", ")
	}
	return fmt.Sprintf("%s(%s%s) nth=%d do=%s", t.Boundary, t.Op, filter, max(t.Nth, 1), t.Action)
}

// Operations are the operations a trigger may name: the neutral ones,
// then every AMQP 0-9-1 method, sorted (for a parser's "did you mean").
func Operations() []string {
	return append([]string{OpPublish, OpDeliver, OpAck}, slices.Sorted(maps.Keys(methodTables().byName))...)
}

// UnknownOperation is the error of an operation the proxy does not know.
func UnknownOperation(op string) error {
	return fmt.Errorf("unknown operation %q (want publish, deliver, ack or an AMQP 0-9-1 method such as basic.publish)", op)
}

// Checked is a trigger Compile accepted: ArmChecked arms it as it is,
// never checking it again.
type Checked struct{ t Trigger }

// Compile is t checked (Check), for ArmChecked.
func (t Trigger) Compile() (Checked, error) {
	if err := t.check(); err != nil {
		return Checked{}, err
	}
	return Checked{t}, nil
}

// Check says what is wrong with a trigger (Arm refuses it): an unknown
// operation, or a boundary it does not have.
func (t Trigger) Check() error { return t.check() }

// check says what is wrong with a trigger.
func (t Trigger) check() error {
	if err := t.checkOp(); err != nil {
		return err
	}
	return t.checkAction()
}

// checkAction says where duplicate and drop do not apply: a duplicate
// takes a publish before it goes out (its confirm the broker would number
// twice: reply(publish) cannot be one) or a delivery; a drop what the
// server sends (a confirm, a delivery, an -ok).
func (t Trigger) checkAction() error {
	publish := t.Op == OpPublish || t.Op == "basic.publish"
	deliver := t.Op == OpDeliver || t.Op == "basic.deliver" || t.Op == "basic.get-ok"
	switch {
	case t.Do == fault.Duplicate && publish && t.Boundary == Reply:
		return fmt.Errorf("do: duplicate of a publish is request(%s): its reply is the confirm, and the broker would number the copy's confirm too", t.Op)
	case t.Do == fault.Duplicate && !publish && !(deliver && t.Boundary == Reply):
		return fmt.Errorf("do: duplicate applies on RabbitMQ to a publish (request(publish)) or a delivery (reply(deliver)), not to %s(%s)", t.Boundary, t.Op)
	case t.Do == fault.Drop && t.Boundary != Reply:
		return fmt.Errorf("do: drop loses what the server sends: use reply(%s)", t.Op)
	}
	return nil
}

// checkOp says what is wrong with a trigger's boundary and operation.
func (t Trigger) checkOp() error {
	if t.Boundary != Request && t.Boundary != Reply {
		return fmt.Errorf("unknown boundary %v", t.Boundary)
	}
	switch t.Op {
	case OpPublish, OpDeliver:
		return nil
	case OpAck:
		if t.Boundary == Reply {
			return fmt.Errorf("AMQP answers no basic.ack: use request(ack)")
		}
		return nil
	case "":
		return fmt.Errorf("a trigger needs the operation it waits for")
	}
	id, ok := methodTables().byName[t.Op]
	if !ok {
		return UnknownOperation(t.Op)
	}
	info := methodTables().methods[id]
	switch {
	case t.Boundary == Request && !info.client:
		return fmt.Errorf("%s is the server's: it has no request boundary (use reply)", t.Op)
	case t.Boundary == Reply && !answered(info) && !info.server:
		return fmt.Errorf("the server answers no %s", t.Op)
	}
	return nil
}

// answered reports whether a client's method has an answer to hold: a
// synchronous method's -ok, or a publish's confirm.
func answered(info methodInfo) bool {
	return info.client && (len(info.replies) > 0 || info.name == "basic.publish")
}

// atServer reports whether the trigger counts what the server sends
// (else what the client sends, holding its answer at Reply).
func (t Trigger) atServer() bool {
	switch t.Op {
	case OpDeliver:
		return t.Boundary == Reply
	case OpPublish, OpAck:
		return false
	}
	return t.Boundary == Reply && !answered(methodTables().lookup(t.Op))
}

// crossing is one method (with its content) as the triggers see it.
type crossing struct {
	kind                        Kind
	method                      string
	exchange, routingKey, queue string
	queueKnown                  bool // an ack's: the proxy saw its delivery
	fromServer                  bool
	noAck                       bool // a delivery to a consumer or basic.get that takes no acks
}

// matches reports whether a crossing is the trigger's.
func (t Trigger) matches(x crossing) bool {
	if x.fromServer != t.atServer() || !t.filter(x) {
		return false
	}
	switch t.Op {
	case OpPublish:
		return x.method == "basic.publish"
	case OpDeliver:
		if t.Boundary == Request {
			return x.method == "basic.get"
		}
		return x.kind == KindDelivery
	case OpAck:
		return x.method == "basic.ack"
	}
	return x.method == t.Op
}

// filter applies Exchange, RoutingKey and Queue.
func (t Trigger) filter(x crossing) bool {
	queue := x.queue
	if x.method == "basic.publish" && x.exchange == "" {
		queue = x.routingKey // the default exchange routes to the queue of that name
	}
	return (t.Exchange == "" || t.Exchange == x.exchange) && (t.RoutingKey == "" || t.RoutingKey == x.routingKey) &&
		(t.Queue == "" || t.Queue == queue || x.kind == KindAck && !x.queueKnown)
}

// Armed is a trigger waiting on a proxy.
type Armed struct {
	*fault.Armed
	Trigger Trigger
}
