package nats

import (
	"bytes"
	"strings"
	"testing"
)

var natsSeeds = []string{
	"CONNECT {\"verbose\":false,\"headers\":true,\"pass\":\"x\"}\r\nPING\r\n",
	"PUB foo.bar _INBOX.a.1 5\r\nhello\r\n",
	"HPUB foo _INBOX.a.2 22 27\r\nNATS/1.0\r\nNats-Msg-Id: e1\r\n\r\nhello\r\n",
	"PUB $JS.ACK.S.c.1.2.3.1700000000.0 4\r\n+ACK\r\nPUB $JS.ACK.S.c.1.2.3.1.0 0\r\n\r\n",
	"PUB $JS.API.CONSUMER.MSG.NEXT.S.c _INBOX.x 11\r\n{\"batch\":1}\r\n",
	"SUB _INBOX.a.* 1\r\nSUB foo q 2\r\nUNSUB 1\r\nUNSUB 2 5\r\n",
	"pub\tfoo 0\n\r\nping\n",
	"INFO {\"server_id\":\"x\",\"host\":\"0.0.0.0\",\"port\":4222,\"headers\":true,\"connect_urls\":[\"a:1\"]}\r\n",
	"MSG foo.bar 1 $JS.ACK.S.c.1.2.3.1700000000.0 5\r\nhello\r\n",
	"HMSG _INBOX.x 2 28 28\r\nNATS/1.0 409 Consumer Deleted\r\n\r\n\r\n",
	"MSG _INBOX.a.1 1 27\r\n{\"stream\":\"S\",\"seq\":1}\r\n+OK\r\n-ERR 'Authorization Violation'\r\nPONG\r\n",
	"PUB a 99999999999999999999\r\n",
	"HPUB a 9 3\r\nabc\r\n",
	"\x16\x03\x01\x00\x05hello",
}

// fuzzRead reads arbitrary bytes as one side's operations, with small
// limits so that the fuzzer reaches them: never a panic; each
// operation's bytes are the input's, in order, and within the limits; a
// refusal is one well-formed -ERR line; what the proxy reads of an
// operation (its kind, headers, ack subject, INFO) never panics either.
func fuzzRead(t *testing.T, in []byte, server bool) {
	r := newReader(bytes.NewReader(in), server)
	r.maxPayload, r.maxLine = 256, 64
	var consumed []byte
	for {
		if r.tls() {
			return
		}
		m, err := r.next()
		if err != nil {
			if pe, ok := err.(*protoError); ok {
				line := string(pe.line())
				if !strings.HasPrefix(line, "-ERR '") || strings.IndexAny(line[:len(line)-2], "\r\n") >= 0 || !strings.HasSuffix(line, "'\r\n") {
					t.Fatalf("refusal %q is not one -ERR line", line)
				}
			}
			return
		}
		if len(m.raw) == 0 || len(m.raw) > r.maxLine+2+r.maxPayload+2 {
			t.Fatalf("an operation of %d bytes", len(m.raw))
		}
		if m.size >= 0 && (len(m.payload) != m.size || m.hdr > m.size || !bytes.Contains(m.raw, m.payload)) {
			t.Fatalf("payload %q of %q: size %d, header %d", m.payload, m.raw, m.size, m.hdr)
		}
		consumed = append(consumed, m.raw...)
		if !bytes.HasPrefix(in, consumed) {
			t.Fatalf("forwarded bytes %q are not the input's %q", consumed, in)
		}
		x := classify(&m)
		_ = parseHeader(m.header()).Get("Nats-Msg-Id")
		_ = parseAckSubject(m.subject)
		_ = parseAckSubject(m.reply)
		_, _ = parsePubAck(m.data())
		_ = Trigger{Op: OpAck, Subject: m.subject}.matches(x)
		if m.op == "INFO" {
			_, _, _ = rewriteInfo(m.json, "127.0.0.1:1")
		}
		if m.op == "CONNECT" {
			_ = connectHeaders(m.json)
		}
	}
}

// FuzzNATSClient reads arbitrary client bytes as client operations.
func FuzzNATSClient(f *testing.F) {
	for _, s := range natsSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) { fuzzRead(t, in, false) })
}

// FuzzNATSServer reads arbitrary server bytes as server operations.
func FuzzNATSServer(f *testing.F) {
	for _, s := range natsSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) { fuzzRead(t, in, true) })
}
