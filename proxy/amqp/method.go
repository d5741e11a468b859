package amqp

import (
	"encoding/binary"
	"errors"
	"math"

	"github.com/outboxdrill/runner/internal/lazy"
)

// methodID is a method's class and method numbers.
type methodID struct{ class, method uint16 }

// methodInfo is what the proxy knows of a method.
type methodInfo struct {
	name    string
	client  bool       // a client may send it
	server  bool       // the server may send it
	content bool       // a content header and body follow it
	replies []methodID // a client's synchronous method: what answers it
}

// methods are AMQP 0-9-1's, with RabbitMQ's extensions (basic.nack,
// confirm, connection.blocked, connection.update-secret); byName finds a
// method by its name (class.method). Built on first use (a proxy, a
// trigger's check), not at every start of the runner.
var methodTables = lazy.Value("AMQP methods", func() methodTable {
	methods, byName := map[methodID]methodInfo{}, map[string]methodID{}
	type m = methodInfo
	add := func(class, method uint16, info m, replies ...uint16) {
		for _, r := range replies {
			info.replies = append(info.replies, methodID{class, r})
		}
		methods[methodID{class, method}] = info
		byName[info.name] = methodID{class, method}
	}
	c, s, both := m{client: true}, m{server: true}, m{client: true, server: true}
	named := func(base m, name string) m { base.name = name; return base }
	add(10, 10, named(s, "connection.start"))
	add(10, 11, named(c, "connection.start-ok"))
	add(10, 20, named(s, "connection.secure"))
	add(10, 21, named(c, "connection.secure-ok"))
	add(10, 30, named(s, "connection.tune"))
	add(10, 31, named(c, "connection.tune-ok"))
	add(10, 40, named(c, "connection.open"), 41)
	add(10, 41, named(s, "connection.open-ok"))
	add(10, 50, named(both, "connection.close"), 51)
	add(10, 51, named(both, "connection.close-ok"))
	add(10, 60, named(s, "connection.blocked"))
	add(10, 61, named(s, "connection.unblocked"))
	add(10, 70, named(c, "connection.update-secret"), 71)
	add(10, 71, named(s, "connection.update-secret-ok"))
	add(20, 10, named(c, "channel.open"), 11)
	add(20, 11, named(s, "channel.open-ok"))
	add(20, 20, named(both, "channel.flow"), 21)
	add(20, 21, named(both, "channel.flow-ok"))
	add(20, 40, named(both, "channel.close"), 41)
	add(20, 41, named(both, "channel.close-ok"))
	for _, x := range []struct {
		class, method uint16
		name          string
	}{{40, 10, "exchange.declare"}, {40, 20, "exchange.delete"}, {40, 30, "exchange.bind"}, {40, 40, "exchange.unbind"},
		{50, 10, "queue.declare"}, {50, 20, "queue.bind"}, {50, 30, "queue.purge"}, {50, 40, "queue.delete"}, {50, 50, "queue.unbind"},
		{60, 10, "basic.qos"}, {60, 20, "basic.consume"}, {60, 110, "basic.recover"},
		{85, 10, "confirm.select"}, {90, 10, "tx.select"}, {90, 20, "tx.commit"}, {90, 30, "tx.rollback"}} {
		ok := x.method + 1
		if x.class == 40 && x.method == 40 {
			ok = 51 // exchange.unbind-ok
		}
		add(x.class, x.method, named(c, x.name), ok)
		add(x.class, ok, named(s, x.name+"-ok"))
	}
	add(60, 30, named(both, "basic.cancel"), 31)
	add(60, 31, named(both, "basic.cancel-ok"))
	add(60, 40, m{name: "basic.publish", client: true, content: true})
	add(60, 50, m{name: "basic.return", server: true, content: true})
	add(60, 60, m{name: "basic.deliver", server: true, content: true})
	add(60, 70, named(c, "basic.get"), 71, 72)
	add(60, 71, m{name: "basic.get-ok", server: true, content: true})
	add(60, 72, named(s, "basic.get-empty"))
	add(60, 80, named(both, "basic.ack"))
	add(60, 90, named(c, "basic.reject"))
	add(60, 100, named(c, "basic.recover-async"))
	add(60, 120, named(both, "basic.nack"))
	return methodTable{methods, byName}
})

type methodTable struct {
	methods map[methodID]methodInfo
	byName  map[string]methodID
}

// lookup is the method named name (class.method); the zero methodInfo
// when there is none.
func (t methodTable) lookup(name string) methodInfo { return t.methods[t.byName[name]] }

// method is a decoded method frame: its id, and the arguments the proxy
// reads (of the methods it classifies).
type method struct {
	id   methodID
	info methodInfo

	exchange, routingKey, queue, consumerTag string
	deliveryTag                              uint64
	multiple, requeue, redelivered, noWait   bool
	noAck                                    bool
	replyCode                                uint16 // channel.close, connection.close, basic.return
	replyText                                string
	failed                                   methodID // what a close names
	frameMax                                 uint32   // connection.tune, tune-ok
	channelMax, heartbeat                    uint16   // connection.tune, tune-ok
}

func (m *method) name() string { return m.info.name }

var errSyntax = errors.New("amqp: a method's arguments are malformed")

// parseMethod reads a method frame's payload. A method the proxy does not
// know is an error: the server would refuse it too.
func parseMethod(p []byte) (method, error) {
	d := decoder{b: p}
	m := method{id: methodID{d.u16(), d.u16()}}
	info, ok := methodTables().methods[m.id]
	if d.bad || !ok {
		return m, &connError{code: 540, text: "NOT_IMPLEMENTED - unknown method"}
	}
	m.info = info
	m.args(&d)
	if d.bad {
		return m, &connError{code: 502, text: "SYNTAX_ERROR - the arguments of " + info.name + " are malformed"}
	}
	return m, nil
}

// args reads the arguments the proxy uses, by method.
func (m *method) args(d *decoder) {
	switch m.info.name {
	case "basic.publish":
		d.u16()
		m.exchange, m.routingKey = d.shortstr(), d.shortstr()
	case "basic.deliver":
		m.consumerTag, m.deliveryTag = d.shortstr(), d.u64()
		m.redelivered = d.u8()&1 != 0
		m.exchange, m.routingKey = d.shortstr(), d.shortstr()
	case "basic.get-ok":
		m.deliveryTag = d.u64()
		m.redelivered = d.u8()&1 != 0
		m.exchange, m.routingKey = d.shortstr(), d.shortstr()
	case "basic.get":
		d.u16()
		m.queue = d.shortstr()
		m.noAck = d.u8()&1 != 0
	case "basic.consume":
		d.u16()
		m.queue, m.consumerTag = d.shortstr(), d.shortstr()
		bits := d.u8() // no-local, no-ack, exclusive, no-wait
		m.noAck, m.noWait = bits&2 != 0, bits&8 != 0
	case "basic.consume-ok", "basic.cancel-ok":
		m.consumerTag = d.shortstr()
	case "basic.cancel":
		m.consumerTag = d.shortstr()
		m.noWait = d.u8()&1 != 0
	case "basic.ack":
		m.deliveryTag, m.multiple = d.u64(), d.u8()&1 != 0
	case "basic.nack":
		m.deliveryTag = d.u64()
		bits := d.u8()
		m.multiple, m.requeue = bits&1 != 0, bits&2 != 0
	case "basic.reject":
		m.deliveryTag, m.requeue = d.u64(), d.u8()&1 != 0
	case "basic.return":
		m.replyCode, m.replyText = d.u16(), d.shortstr()
		m.exchange, m.routingKey = d.shortstr(), d.shortstr()
	case "channel.close", "connection.close":
		m.replyCode, m.replyText = d.u16(), d.shortstr()
		m.failed = methodID{d.u16(), d.u16()}
	case "connection.tune", "connection.tune-ok":
		m.channelMax, m.frameMax, m.heartbeat = d.u16(), d.u32(), d.u16()
	case "confirm.select":
		m.noWait = d.u8()&1 != 0
	}
}

// decoder reads AMQP's types from a payload; past its end, or on a
// malformed value, bad is set and zeros come back.
type decoder struct {
	b   []byte
	bad bool
	// fields counts the values a table and what it nests decoded, shared
	// with the inner decoders: past maxFields the table is malformed.
	fields *int
}

// maxFields bounds the values one table decodes into: a void field is
// one byte on the wire and a 16-byte value decoded, so a 64 MB frame of
// them would decode into 1 GB. Headers hold a few dozen.
const maxFields = 1 << 16

func (d *decoder) take(n int) []byte {
	if d.bad || n < 0 || n > len(d.b) {
		d.bad = true
		if n >= 0 && n <= 8 {
			return make([]byte, n) // a fixed-size read decodes as zero
		}
		return nil
	}
	b := d.b[:n]
	d.b = d.b[n:]
	return b
}

func (d *decoder) u8() uint8   { return d.take(1)[0] }
func (d *decoder) u16() uint16 { return binary.BigEndian.Uint16(d.take(2)) }
func (d *decoder) u32() uint32 { return binary.BigEndian.Uint32(d.take(4)) }
func (d *decoder) u64() uint64 { return binary.BigEndian.Uint64(d.take(8)) }

func (d *decoder) shortstr() string { return string(d.take(int(d.u8()))) }

func (d *decoder) longstr() []byte {
	n := d.u32()
	if uint64(n) > uint64(len(d.b)) {
		d.bad = true
		return nil
	}
	return d.take(int(n))
}

// table reads a field table as amqp091-go does; past maxTableDepth it is
// malformed.
func (d *decoder) table(depth int) map[string]any {
	if depth > maxTableDepth {
		d.bad = true
		return nil
	}
	inner := d.inner()
	t := map[string]any{}
	for len(inner.b) > 0 && !inner.bad {
		k := inner.shortstr()
		t[k] = inner.field(depth)
	}
	d.bad = d.bad || inner.bad
	return t
}

// inner is a decoder of the long string that holds a table or an array,
// counting its fields with d's.
func (d *decoder) inner() decoder {
	if d.fields == nil {
		d.fields = new(int)
	}
	return decoder{b: d.longstr(), fields: d.fields}
}

// field reads one typed value of a table or array.
func (d *decoder) field(depth int) any {
	if d.fields != nil {
		if *d.fields++; *d.fields > maxFields {
			d.bad = true
			return nil
		}
	}
	switch d.u8() {
	case 't':
		return d.u8() != 0
	case 'b':
		return int8(d.u8())
	case 'B':
		return d.u8()
	case 's':
		return int16(d.u16())
	case 'u':
		return d.u16()
	case 'I':
		return int32(d.u32())
	case 'i':
		return d.u32()
	case 'l':
		return int64(d.u64())
	case 'f':
		return math.Float32frombits(d.u32())
	case 'd':
		return math.Float64frombits(d.u64())
	case 'D':
		scale := d.u8()
		return Decimal{Scale: scale, Value: int32(d.u32())}
	case 'S':
		return string(d.longstr())
	case 'x':
		return append([]byte(nil), d.longstr()...)
	case 'T':
		return Timestamp(d.u64())
	case 'F':
		return d.table(depth + 1)
	case 'A':
		return d.array(depth + 1)
	case 'V':
		return nil
	}
	d.bad = true
	return nil
}

func (d *decoder) array(depth int) []any {
	if depth > maxTableDepth {
		d.bad = true
		return nil
	}
	inner := d.inner()
	var a []any
	for len(inner.b) > 0 && !inner.bad {
		a = append(a, inner.field(depth))
	}
	d.bad = d.bad || inner.bad
	return a
}

// Decimal is a field table's decimal value: Value / 10^Scale.
type Decimal struct {
	Scale uint8
	Value int32
}

// Timestamp is a field table's or a message's timestamp: seconds since
// the Unix epoch.
type Timestamp uint64

// Properties are a message's basic properties, from its content header.
type Properties struct {
	ContentType, ContentEncoding string
	Headers                      map[string]any
	DeliveryMode, Priority       uint8
	CorrelationID, ReplyTo       string
	Expiration, MessageID        string
	Timestamp                    Timestamp
	Type, UserID, AppID          string
}

// contentHeader is a content header frame's payload: the body's size and
// the properties.
type contentHeader struct {
	class    uint16
	bodySize uint64
	props    Properties
	// badProps: the property list could not be read (the frame goes on as
	// it is; the history lacks the properties).
	badProps bool
}

// parseContentHeader reads a content header. Only its class, weight and
// body size must be well formed for the frame to be relayed.
func parseContentHeader(p []byte) (contentHeader, bool) {
	d := decoder{b: p}
	h := contentHeader{class: d.u16()}
	d.u16() // weight
	h.bodySize = d.u64()
	if d.bad {
		return h, false
	}
	h.props, h.badProps = readProperties(&d)
	return h, true
}

// readProperties reads the property flags (a chain of 16-bit words, each
// with bit 0 saying another follows) and the basic class's properties.
func readProperties(d *decoder) (Properties, bool) {
	var p Properties
	flags := d.u16()
	for f := flags; f&1 != 0 && !d.bad; f = d.u16() {
	}
	has := func(bit uint16) bool { return flags&bit != 0 }
	str := func(bit uint16, s *string) {
		if has(bit) {
			*s = d.shortstr()
		}
	}
	str(0x8000, &p.ContentType)
	str(0x4000, &p.ContentEncoding)
	if has(0x2000) {
		p.Headers = d.table(0)
	}
	if has(0x1000) {
		p.DeliveryMode = d.u8()
	}
	if has(0x0800) {
		p.Priority = d.u8()
	}
	str(0x0400, &p.CorrelationID)
	str(0x0200, &p.ReplyTo)
	str(0x0100, &p.Expiration)
	str(0x0080, &p.MessageID)
	if has(0x0040) {
		p.Timestamp = Timestamp(d.u64())
	}
	str(0x0020, &p.Type)
	str(0x0010, &p.UserID)
	str(0x0008, &p.AppID)
	return p, d.bad
}
