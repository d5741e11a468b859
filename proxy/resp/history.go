package resp

import (
	"strings"
	"time"
)

// Publish is an XADD Redis accepted, as the service sent it.
type Publish struct {
	At     time.Time
	Conn   int
	Stream string
	ID     string // the entry id Redis replied
	Fields map[string]string
	Copy   bool // the proxy's second send of it (a duplicate), not the service's
}

// Delivery is one entry Redis handed the service (XREADGROUP, XCLAIM or
// XAUTOCLAIM).
type Delivery struct {
	At                      time.Time
	Conn                    int
	Command                 string
	Stream, Group, Consumer string
	ID                      string
	Fields                  map[string]string // nil for a deleted entry or JUSTID
}

// Ack is an XACK and how many entries Redis said it acknowledged.
type Ack struct {
	At            time.Time
	Conn          int
	Stream, Group string
	IDs           []string
	Acked         string
}

// History sorts the relayed commands into publishes, deliveries and acks
// (in the order the proxy saw them; failed commands are left out).
func (p *Proxy) History() (pubs []Publish, dels []Delivery, acks []Ack) {
	for _, e := range p.Events() {
		if e.Reply.Err() || e.Reply.Type == 0 || len(e.Command) < 2 {
			continue
		}
		args := e.Command
		switch strings.ToUpper(args[0]) {
		case "XADD":
			if _, fields, ok := xaddFields(args); ok && !e.Reply.Null {
				pubs = append(pubs, Publish{At: e.At, Conn: e.Conn, Stream: args[1], ID: e.Reply.Str, Fields: fields, Copy: e.Copy})
			}
		case "XACK":
			if len(args) >= 4 {
				acks = append(acks, Ack{At: e.At, Conn: e.Conn, Stream: args[1], Group: args[2], IDs: args[3:], Acked: e.Reply.Str})
			}
		case "XREADGROUP":
			dels = append(dels, readGroup(e)...)
		case "XCLAIM", "XAUTOCLAIM":
			dels = append(dels, claimed(e)...)
		}
	}
	return pubs, dels, acks
}

// xaddFields skips XADD's options to its id and field/value pairs.
func xaddFields(args []string) (string, map[string]string, bool) {
	i := 2
	for i < len(args) {
		switch strings.ToUpper(args[i]) {
		case "NOMKSTREAM":
			i++
			continue
		case "MAXLEN", "MINID":
			i++
			if i < len(args) && (args[i] == "=" || args[i] == "~") {
				i++
			}
			i++
			if i < len(args) && strings.EqualFold(args[i], "LIMIT") {
				i += 2
			}
			continue
		}
		break
	}
	if i >= len(args) || (len(args)-i-1)%2 != 0 {
		return "", nil, false
	}
	return args[i], pairs(args[i+1:]), true
}

func pairs(kv []string) map[string]string {
	m := make(map[string]string, len(kv)/2)
	for j := 0; j+1 < len(kv); j += 2 {
		m[kv[j]] = kv[j+1]
	}
	return m
}

// readGroup reads XREADGROUP GROUP g c ... STREAMS s... and its reply: an
// array of [stream, entries] (RESP2) or a map stream → entries (RESP3).
func readGroup(e Event) []Delivery {
	args := e.Command
	if len(args) < 4 || !strings.EqualFold(args[1], "GROUP") {
		return nil
	}
	group, consumer := args[2], args[3]
	var out []Delivery
	each := func(stream, entries Value) {
		for _, d := range entryList(entries) {
			d.At, d.Conn, d.Command, d.Stream, d.Group, d.Consumer = e.At, e.Conn, "XREADGROUP", stream.Str, group, consumer
			out = append(out, d)
		}
	}
	r := e.Reply
	if r.Type == '%' {
		for i := 0; i+1 < len(r.Elems); i += 2 {
			each(r.Elems[i], r.Elems[i+1])
		}
		return out
	}
	for _, s := range r.Elems {
		if len(s.Elems) == 2 {
			each(s.Elems[0], s.Elems[1])
		}
	}
	return out
}

// claimed reads XCLAIM s g c ... (reply: entries, or ids with JUSTID) and
// XAUTOCLAIM s g c ... (reply: [next, entries, deleted]).
func claimed(e Event) []Delivery {
	args := e.Command
	if len(args) < 4 {
		return nil
	}
	name := strings.ToUpper(args[0])
	entries := e.Reply
	if name == "XAUTOCLAIM" {
		if len(entries.Elems) < 2 {
			return nil
		}
		entries = entries.Elems[1]
	}
	out := entryList(entries)
	for i := range out {
		out[i].At, out[i].Conn, out[i].Command, out[i].Stream, out[i].Group, out[i].Consumer = e.At, e.Conn, name, args[1], args[2], args[3]
	}
	return out
}

// entryList reads [[id, [f, v, ...]], ...]; a bare id (JUSTID) or a nil
// field list (a deleted entry) gives no fields.
func entryList(v Value) []Delivery {
	var out []Delivery
	for _, en := range v.Elems {
		switch {
		case len(en.Elems) == 2:
			d := Delivery{ID: en.Elems[0].Str}
			if !en.Elems[1].Null {
				d.Fields = pairs(en.Elems[1].Strings())
			}
			out = append(out, d)
		case len(en.Elems) == 0 && en.Str != "":
			out = append(out, Delivery{ID: en.Str})
		}
	}
	return out
}
