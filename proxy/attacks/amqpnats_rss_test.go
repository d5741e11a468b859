package attacks

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/outboxdrill/runner/proxy/amqp"
	"github.com/outboxdrill/runner/proxy/nats"
)

// brokerChild starts the AMQP or NATS proxy of the child process.
func brokerChild(t *testing.T, kind, upstream string) string {
	var addr string
	var err error
	switch kind {
	case "amqp":
		var p *amqp.Proxy
		if p, err = amqp.Listen(upstream); err == nil {
			t.Cleanup(func() { p.Close() })
			addr = p.Addr()
		}
	case "nats":
		var p *nats.Proxy
		if p, err = nats.Listen(upstream); err == nil {
			t.Cleanup(func() { p.Close() })
			addr = p.Addr()
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// hostOf is the host:port of the URL in env, else def.
func hostOf(env, def string) string {
	if u, err := url.Parse(os.Getenv(env)); err == nil && u.Host != "" {
		return u.Host
	}
	return def
}

// TestAttackRSSBrokers is TestAttackRSS for the AMQP and NATS proxies (on
// the RabbitMQ and NATS servers of RUNNER_RABBITMQ_URL and RUNNER_NATS_URL,
// else 127.0.0.1's): OUTBOXDRILL_ATTACK_RSS=1 go test ./proxy/attacks
// -run TestAttackRSSBrokers -v.
func TestAttackRSSBrokers(t *testing.T) {
	if os.Getenv(rssEnv) != "1" {
		t.Skipf("a measurement: set %s=1", rssEnv)
	}
	measureAll(t, brokerAttacks(), map[string]string{
		"amqp": hostOf("RUNNER_RABBITMQ_URL", "127.0.0.1:5672"),
		"nats": hostOf("RUNNER_NATS_URL", "127.0.0.1:4222"),
	})
}

func brokerAttacks() []attack {
	return []attack{
		{name: "AMQP H2 1-byte body, 20 MiB of empty frames", kind: "amqp", run: func(c net.Conn) string {
			if err := amqpOpen(c, 2047); err != nil {
				return "open: " + err.Error()
			}
			c.Write(amqpPublish(1, 1))
			go repeat(c, string(amqpFrame(3, 1, nil)), 20<<20)
			return answer(c, 20*time.Second)
		}},
		{name: "AMQP H3 60 MiB body in 128 kB frames", kind: "amqp", n: 16, run: func(c net.Conn) string {
			if err := amqpOpen(c, 2047); err != nil {
				return "open: " + err.Error()
			}
			c.Write(amqpPublish(1, 64<<20))
			go repeat(c, string(amqpFrame(3, 1, make([]byte, 128<<10-8))), 60<<20)
			return answer(c, 20*time.Second)
		}},
		{name: "AMQP H3 8 MiB body in 1-byte frames", kind: "amqp", n: 1, run: func(c net.Conn) string {
			if err := amqpOpen(c, 2047); err != nil {
				return "open: " + err.Error()
			}
			c.Write(amqpPublish(1, 8<<20))
			go repeat(c, string(amqpFrame(3, 1, []byte("x"))), 9*(8<<20))
			return answer(c, 30*time.Second)
		}},
		{name: "AMQP M5 half-sent messages on 65,534 channels", kind: "amqp", n: 4, run: func(c net.Conn) string {
			if err := amqpOpen(c, 2047); err != nil {
				return "open: " + err.Error()
			}
			var b bytes.Buffer
			for ch := uint16(2); ch < 65535; ch++ {
				b.Write(amqpFrame(1, ch, []byte{0, 20, 0, 10, 0}))
				b.Write(amqpPublish(ch, 1))
			}
			go c.Write(b.Bytes())
			return answer(c, 20*time.Second)
		}},
		{name: "NATS M1 60,000 unanswered PUBs, 4 kB lines", kind: "nats", n: 4, run: func(c net.Conn) string {
			return natsFlood(c, 60000, func(i int) string {
				return fmt.Sprintf("PUB nobody.listens %s.%d 0\r\n\r\n", strings.Repeat("r", 4000), i)
			})
		}},
		{name: "NATS M2 30,000 SUB lines of 4 kB", kind: "nats", n: 2, run: func(c net.Conn) string {
			return natsFlood(c, 30000, func(i int) string {
				return fmt.Sprintf("SUB %s.%d %d\r\n", strings.Repeat("s", 4000), i, i)
			})
		}},
	}
}

// natsFlood connects, sends n operations and a PING, and reports whether
// the PONG came.
func natsFlood(c net.Conn, n int, op func(int) string) string {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line := make([]byte, 64<<10)
	if _, err := c.Read(line); err != nil {
		return "no INFO: " + err.Error()
	}
	var b strings.Builder
	b.WriteString("CONNECT {\"verbose\":false}\r\n")
	for i := range n {
		b.WriteString(op(i))
		if b.Len() > 1<<20 {
			if _, err := io.WriteString(c, b.String()); err != nil {
				return "write: " + err.Error()
			}
			b.Reset()
		}
	}
	io.WriteString(c, b.String()+"PING\r\n")
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	var got []byte
	for !bytes.Contains(got, []byte("PONG\r\n")) {
		k, err := c.Read(line)
		if err != nil {
			return fmt.Sprintf("no PONG: %v (%q)", err, got[:min(len(got), 60)])
		}
		got = append(got, line[:k]...)
	}
	return "PONG"
}

func amqpFrame(typ byte, ch uint16, payload []byte) []byte {
	b := []byte{typ}
	b = binary.BigEndian.AppendUint16(b, ch)
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	return append(append(b, payload...), 0xCE)
}

// amqpPublish is a basic.publish to the default exchange and a content
// header announcing size bytes, on ch.
func amqpPublish(ch uint16, size uint64) []byte {
	pub := amqpFrame(1, ch, []byte{0, 60, 0, 40, 0, 0, 0, 4, 'n', 'o', 'n', 'e', 0})
	hdr := binary.BigEndian.AppendUint64([]byte{0, 60, 0, 0}, size)
	return append(pub, amqpFrame(2, ch, append(hdr, 0, 0))...)
}

// amqpOpen opens an AMQP connection as guest, agreeing to channelMax and
// a frame-max of 128 kB, no heartbeats, and opens channel 1.
func amqpOpen(c net.Conn, channelMax uint16) error {
	c.Write([]byte("AMQP\x00\x00\x09\x01"))
	if err := amqpAwait(c, 10, 10); err != nil {
		return err
	}
	start := append([]byte{0, 10, 0, 11, 0, 0, 0, 0, 5}, "PLAIN"...)
	start = binary.BigEndian.AppendUint32(start, 12)
	start = append(append(start, "\x00guest\x00guest"...), 5)
	c.Write(amqpFrame(1, 0, append(start, "en_US"...)))
	if err := amqpAwait(c, 10, 30); err != nil {
		return err
	}
	tune := binary.BigEndian.AppendUint16([]byte{0, 10, 0, 31}, channelMax)
	tune = binary.BigEndian.AppendUint32(tune, 128<<10)
	c.Write(amqpFrame(1, 0, append(tune, 0, 0)))
	c.Write(amqpFrame(1, 0, []byte{0, 10, 0, 40, 1, '/', 0, 0}))
	if err := amqpAwait(c, 10, 41); err != nil {
		return err
	}
	c.Write(amqpFrame(1, 1, []byte{0, 20, 0, 10, 0})) // channel.open on 1
	return amqpAwait(c, 20, 11)
}

// amqpAwait reads frames until the method class.method.
func amqpAwait(c net.Conn, class, method uint16) error {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	for {
		head := make([]byte, 7)
		if _, err := io.ReadFull(c, head); err != nil {
			return err
		}
		p := make([]byte, binary.BigEndian.Uint32(head[3:7])+1)
		if _, err := io.ReadFull(c, p); err != nil {
			return err
		}
		if head[0] == 1 && len(p) >= 5 && binary.BigEndian.Uint16(p) == class && binary.BigEndian.Uint16(p[2:]) == method {
			return nil
		}
		if head[0] == 1 && len(p) >= 5 && binary.BigEndian.Uint16(p) == 10 && binary.BigEndian.Uint16(p[2:]) == 50 {
			return fmt.Errorf("closed: %q", p[6:min(len(p), 80)])
		}
	}
}
