package system

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"strings"

	"github.com/outboxdrill/runner/internal/lazy"
)

// EventIDs turns a scenario's event names (produce(event=bus-1)) into the
// ids the team's outbox event_id column holds: the names themselves for a
// text column, a name-based UUID for a uuid column, a number for an
// integer one. The zero value keeps the names.
type EventIDs struct {
	// Column and Type name the column and its type as PostgreSQL spells
	// them (outbox.event_id, uuid), for messages.
	Column, Type string
	kind         idKind
	max          int64 // the largest id an integer column holds
}

type idKind int

const (
	idText idKind = iota
	idUUID
	idInteger
)

// idTypes are the column types event ids can be made for; an integer
// type's value is the largest id it holds.
var idTypes = map[string]struct {
	kind idKind
	max  int64
}{
	"text": {idText, 0}, "character varying": {idText, 0}, "character": {idText, 0}, "citext": {idText, 0}, "name": {idText, 0},
	"uuid":     {idUUID, 0},
	"smallint": {idInteger, math.MaxInt16}, "integer": {idInteger, math.MaxInt32}, "bigint": {idInteger, math.MaxInt64},
}

// NewEventIDs gives the ids for column (e.g. "outbox.event_id") of type
// typ, the type's name as PostgreSQL's format_type gives it without its
// modifiers (uuid, bigint, character varying). Another type is an error
// naming the column and its type.
func NewEventIDs(column, typ string) (EventIDs, error) {
	t, ok := idTypes[typ]
	if !ok {
		return EventIDs{}, fmt.Errorf("%s is of type %s: the runner can give event ids to a text, uuid, smallint, integer or bigint column only", column, typ)
	}
	return EventIDs{Column: column, Type: typ, kind: t.kind, max: t.max}, nil
}

// Names reports whether the ids are the names themselves (a text column).
func (e EventIDs) Names() bool { return e.kind == idText }

// ID is the id of the event named name, as the column's text form: the
// same name always gives the same id. A name that already is a value of
// the column's type is that value, as PostgreSQL prints it (a team's own
// UUID, lower-cased; a decimal number in range): the team's checks can
// name it as written. Any other name is mapped: a uuid column gets the
// name's UUID version 5 in the URL namespace (uuid5(NAMESPACE_URL,
// "bus-1") in any library); an integer column the number a name ends in
// (bus-7 → 7) when it fits, else a stable hash of the name from 1 to the
// type's maximum.
func (e EventIDs) ID(name string) string {
	switch e.kind {
	case idUUID:
		if u, ok := parseUUID(name); ok {
			return u
		}
		return uuidV5(namespaceURL, name)
	case idInteger:
		if n, ok := parseInt(name, e.max); ok {
			return strconv.FormatInt(n, 10)
		}
		return strconv.FormatInt(intID(name, e.max), 10)
	}
	return name
}

// parseUUID reads s as PostgreSQL's uuid input does (string_to_uuid in
// its uuid.c): optional braces around 32 hex digits, a hyphen allowed
// after any group of four, upper or lower case; ok is false for anything
// else. The result is the canonical form PostgreSQL prints.
func parseUUID(s string) (string, bool) {
	braces := strings.HasPrefix(s, "{")
	if braces {
		s = s[1:]
	}
	var b [16]byte
	for i := range b {
		if len(s) < 2 {
			return "", false
		}
		v, err := strconv.ParseUint(s[:2], 16, 8)
		if err != nil { // ParseUint takes no sign, prefix or underscore in base 16
			return "", false
		}
		b[i], s = byte(v), s[2:]
		if i%2 == 1 && i < len(b)-1 && strings.HasPrefix(s, "-") {
			s = s[1:]
		}
	}
	if braces {
		if !strings.HasPrefix(s, "}") {
			return "", false
		}
		s = s[1:]
	}
	if s != "" {
		return "", false
	}
	return formatUUID(b), true
}

// parseInt reads s as a decimal integer of the column's range (an
// optional sign, digits only: what a scenario writes as a number); ok is
// false for anything else, which is then a name to map.
func parseInt(s string, max int64) (int64, bool) {
	digits := strings.TrimLeft(s, "+-")
	if len(s)-len(digits) > 1 || digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > max || n < -max-1 {
		return 0, false
	}
	return n, true
}

// trailingDigits are the digits a name ends in: bus-7 → 7.
var trailingDigits = lazy.Regexp(`[0-9]+$`)

func intID(name string, max int64) int64 {
	if d := trailingDigits().FindString(name); d != "" {
		if n, err := strconv.ParseInt(d, 10, 64); err == nil && n >= 1 && n <= max {
			return n
		}
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64()%uint64(max)) + 1
}

// namespaceURL is RFC 9562's URL namespace, 6ba7b811-9dad-11d1-80b4-00c04fd430c8.
var namespaceURL = [16]byte{0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}

// uuidV5 is the name-based UUID (SHA-1, version 5) of name in namespace
// ns (RFC 9562, section 5.5), in its canonical text form.
func uuidV5(ns [16]byte, name string) string {
	h := sha1.New()
	h.Write(ns[:])
	h.Write([]byte(name))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // the RFC's variant
	return formatUUID(u)
}

// formatUUID is u in the canonical text form: lower-case hex, 8-4-4-4-12.
func formatUUID(u [16]byte) string {
	s := hex.EncodeToString(u[:])
	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:]
}
