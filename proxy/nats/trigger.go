package nats

import (
	"fmt"
	"strings"

	"github.com/outboxdrill/runner/proxy/fault"
)

// Boundary, Request and Reply are fault's (the reply of each operation
// is said at its constant below).
type Boundary = fault.Boundary

const Request, Reply = fault.Request, fault.Reply

// The operations a trigger names: broker-neutral ones, as every proxy has
// them, and NATS's own.
const (
	// OpPublish is a JetStream publish: a PUB or HPUB with a reply
	// subject, to a subject outside the server's own ($JS., $SYS., $JSC.,
	// $NRG., $SRV., _INBOX.). Its reply is the PubAck.
	OpPublish = fault.OpPublish
	// OpDeliver is, at Reply, a JetStream delivery (a MSG or HMSG whose
	// reply subject is $JS.ACK.…); at Request, a pull request.
	OpDeliver = fault.OpDeliver
	// OpAck is a positive ack: +ACK (or an empty or +OK payload) or +NXT
	// published to a delivery's $JS.ACK subject.
	OpAck = fault.OpAck

	OpPUB  = "PUB"      // any PUB or HPUB the client sends
	OpMSG  = "MSG"      // any MSG or HMSG the server sends (Reply only)
	OpPull = "MSG.NEXT" // a pull request: PUB $JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer> (Request only)
	// The kinds of ack, by their payload.
	OpAckAck  = "+ACK"
	OpAckNak  = "-NAK"
	OpAckWPI  = "+WPI"
	OpAckTerm = "+TERM"
	OpAckNext = "+NXT"
)

// Trigger arms one fault at the Nth operation named Op whose subject
// matches Subject.
//
// Subject is a NATS subject pattern (* a token, > the rest; "" any),
// matched against the subject on the wire: the published subject of a
// publish or PUB, the $JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>
// subject of a pull request, the $JS.ACK.<stream>.<consumer>.… subject of
// an ack, the message's own subject of a delivery or MSG.
//
// Error does not forward the operation. A publish's client gets a
// JetStream PubAck error on its reply subject (503, err_code 10077, a
// store failure); a pull request's a 409 status; any other operation with
// a reply subject a 503 (no responders) status; an ack without one is
// lost, as on a lossy link. A delivery at Reply is dropped: the consumer
// never sees it and JetStream redelivers it after its AckWait.
type Trigger struct {
	Boundary Boundary
	Op       string
	Subject  string
	Nth      int // 1 = the first; 0 counts as 1
	fault.Action
}

func (t Trigger) String() string {
	f := ""
	if t.Subject != "" {
		f = ", subject=" + t.Subject
	}
	return fmt.Sprintf("%s(%s%s) nth=%d do=%s", t.Boundary, t.Op, f, max(t.Nth, 1), t.Action)
}

// Operations are the operations a trigger may name: the neutral ones,
// then NATS's own (for a parser's "did you mean").
func Operations() []string {
	return []string{OpPublish, OpDeliver, OpAck, OpPUB, OpMSG, OpPull, OpAckAck, OpAckNak, OpAckWPI, OpAckTerm, OpAckNext}
}

// UnknownOperation is the error of an operation the proxy does not know.
func UnknownOperation(op string) error {
	return fmt.Errorf("unknown operation %q (want publish, deliver, ack, PUB, MSG, MSG.NEXT, +ACK, -NAK, +WPI, +TERM or +NXT)", op)
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
// operation, a boundary it does not have, a malformed subject.
func (t Trigger) Check() error { return t.check() }

// check says what is wrong with a trigger.
func (t Trigger) check() error {
	if err := t.checkOp(); err != nil {
		return err
	}
	return t.checkAction()
}

// checkAction says where duplicate and drop do not apply: a duplicate
// takes a JetStream publish (sent twice) or a delivery (handed twice),
// which NATS numbers by nothing the client must see once; a drop takes
// what the server sends (a reply, a delivery), whose loss NATS's
// at-most-once core allows.
func (t Trigger) checkAction() error {
	switch {
	case t.Do == fault.Duplicate && t.Op != OpPublish && !(t.Op == OpDeliver && t.Boundary == Reply):
		return fmt.Errorf("do: duplicate applies on NATS to a publish (publish) or a delivery (reply(deliver)), not to %s(%s)", t.Boundary, t.Op)
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
	case OpPublish, OpDeliver, OpAck, OpPUB, OpAckAck, OpAckNak, OpAckWPI, OpAckTerm, OpAckNext:
	case OpMSG:
		if t.Boundary == Request {
			return fmt.Errorf("%s is the server's: it has no request boundary (use reply)", t.Op)
		}
	case OpPull:
		if t.Boundary == Reply {
			return fmt.Errorf("a pull request is answered by deliveries: use reply(%s)", OpDeliver)
		}
	case "":
		return fmt.Errorf("a trigger needs the operation it waits for")
	default:
		return UnknownOperation(t.Op)
	}
	if !validPattern(t.Subject) {
		return fmt.Errorf("subject %q is not a NATS subject pattern", t.Subject)
	}
	return nil
}

// crossing is one operation as the triggers see it.
type crossing struct {
	kind       Kind
	ack        string // a KindAck's kind: +ACK, -NAK, +WPI, +TERM, +NXT, "" unknown
	subject    string
	fromServer bool
}

// matches reports whether a crossing is the trigger's.
func (t Trigger) matches(x crossing) bool {
	if !matchSubject(t.Subject, x.subject) {
		return false
	}
	switch t.Op {
	case OpPublish:
		return x.kind == KindPublish
	case OpDeliver:
		if t.Boundary == Request {
			return x.kind == KindPull
		}
		return x.kind == KindDelivery
	case OpAck:
		return x.kind == KindAck && (x.ack == OpAckAck || x.ack == OpAckNext)
	case OpPUB:
		return !x.fromServer
	case OpMSG:
		return x.fromServer
	case OpPull:
		return x.kind == KindPull
	}
	return x.kind == KindAck && x.ack == t.Op
}

// Armed is a trigger waiting on a proxy.
type Armed struct {
	*fault.Armed
	Trigger Trigger
}

// validPattern reports whether p is empty or a subject pattern: tokens
// not empty, > only last.
func validPattern(p string) bool {
	if p == "" {
		return true
	}
	toks := strings.Split(p, ".")
	for i, tok := range toks {
		if tok == "" || strings.ContainsAny(tok, " \t\r\n") || tok == ">" && i != len(toks)-1 {
			return false
		}
	}
	return true
}

// matchSubject reports whether subject matches pattern ("" matches any).
func matchSubject(pattern, subject string) bool {
	if pattern == "" {
		return true
	}
	for {
		pt, prest, pmore := strings.Cut(pattern, ".")
		st, srest, smore := strings.Cut(subject, ".")
		switch {
		case pt == ">":
			return st != ""
		case pt != "*" && pt != st:
			return false
		case !pmore || !smore:
			return pmore == smore
		}
		pattern, subject = prest, srest
	}
}
