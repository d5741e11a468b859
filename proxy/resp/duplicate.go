package resp

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/outboxdrill/runner/proxy/fault"
)

// The duplicate and drop actions on Redis. A duplicated XADD is sent
// twice (conn.sendTwice); a duplicated delivery (the reply of XREADGROUP,
// XCLAIM or XAUTOCLAIM) reaches the client with each entry it handed out
// twice, right after itself, as a redelivery of the same entry would: the
// entry id is Redis's own, so a consumer that dedupes by it, or by the
// event it carries, absorbs it, and a second XACK of it is harmless (Redis
// answers 0). A drop swallows a reply and silences the connection.

// deliveries are the commands whose reply a duplicate doubles.
var deliveries = map[string]bool{"XREADGROUP": true, "XCLAIM": true, "XAUTOCLAIM": true}

// CheckAction says where t's action does not apply on Redis (its command
// upper case, neutral names mapped): duplicate takes a publish at either
// boundary, a delivery at its reply; drop takes a reply.
func CheckAction(t fault.Trigger) error {
	cmd := strings.ToUpper(t.Filter.Command)
	switch t.Action.Do {
	case fault.Duplicate:
		if cmd == "XADD" || deliveries[cmd] && t.Boundary == fault.Reply {
			return nil
		}
		if deliveries[cmd] {
			return fmt.Errorf("do: duplicate doubles a delivery in its reply: use reply(%s)", cmd)
		}
		return fmt.Errorf("do: duplicate applies on Redis to a publish (XADD) or a delivery (reply of XREADGROUP, XCLAIM, XAUTOCLAIM), not to %s", cmd)
	case fault.Drop:
		if t.Boundary != fault.Reply {
			return fmt.Errorf("do: drop loses a reply: use reply(%s)", cmd)
		}
	}
	return nil
}

// answerTwice passes a delivery's reply with each entry doubled. A reply
// that handed out nothing, or that the proxy cannot write back byte for
// byte (an attribute it does not keep), is passed as it came and the
// trigger fails as unclassifiable. The doubled copy costs what it weighs
// on the account while it is written.
func (c *conn) answerTwice(k *call, v Value, raw []byte, ev Event) bool {
	a := k.strike
	twice, n := doubled(strings.ToUpper(k.cmd[0]), v)
	var why string
	switch {
	case n == 0:
		why = "the " + strings.ToUpper(k.cmd[0]) + " that struck handed out no entry: there was nothing to duplicate"
	case !bytes.Equal(encode(nil, v), raw):
		why = "the reply carries what the proxy does not write back (a RESP3 attribute)"
	}
	tab := c.acct.Tab()
	defer tab.Done()
	if why == "" {
		if err := tab.Take(2 * int64(len(raw))); err != nil {
			why = "the doubled reply would go over the proxy's account: " + err.Error()
		}
	}
	if why != "" {
		ev.Fault = ""
		c.p.record(ev)
		a.Finish(&fault.Unclassifiable{Reason: why})
		return c.write(raw, true)
	}
	ev.Reply = twice // what the client got: the history counts both
	c.p.record(ev)
	a.Finish(nil)
	return c.write(encode(nil, twice), true)
}

// doubled is a delivery reply with each entry list doubled, and how many
// entries it held.
func doubled(cmd string, v Value) (Value, int) {
	if v.Null || v.Err() || len(v.Elems) == 0 {
		return v, 0
	}
	out, n := v, 0
	out.Elems = append([]Value(nil), v.Elems...)
	twice := func(list *Value) {
		n += len(list.Elems)
		list.Elems = append(append([]Value(nil), list.Elems...), list.Elems...)
	}
	switch {
	case cmd == "XCLAIM":
		twice(&out)
	case cmd == "XAUTOCLAIM" && len(out.Elems) >= 2: // [next, entries, deleted]
		twice(&out.Elems[1])
	case cmd == "XREADGROUP" && out.Type == '%': // RESP3: stream → entries
		for i := 1; i < len(out.Elems); i += 2 {
			twice(&out.Elems[i])
		}
	case cmd == "XREADGROUP": // RESP2: [[stream, entries], …]
		for i := range out.Elems {
			if s := out.Elems[i]; len(s.Elems) == 2 {
				s.Elems = append([]Value(nil), s.Elems...)
				twice(&s.Elems[1])
				out.Elems[i] = s
			}
		}
	}
	return out, n
}

// encode writes v as RESP, as the reader read it (attributes aside).
func encode(b []byte, v Value) []byte {
	switch {
	case v.Type == '_':
		return append(b, "_\r\n"...)
	case v.Null:
		return append(b, v.Type, '-', '1', '\r', '\n')
	}
	switch v.Type {
	case '$', '!', '=':
		b = fmt.Appendf(b, "%c%d\r\n", v.Type, len(v.Str))
		return append(append(b, v.Str...), '\r', '\n')
	case '*', '~', '>', '%':
		n := len(v.Elems)
		if v.Type == '%' {
			n /= 2
		}
		b = fmt.Appendf(b, "%c%d\r\n", v.Type, n)
		for _, e := range v.Elems {
			b = encode(b, e)
		}
		return b
	}
	return append(append(append(b, v.Type), v.Str...), '\r', '\n')
}
