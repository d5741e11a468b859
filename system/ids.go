package system

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"math"
	"regexp"
	"strconv"
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
// same name always gives the same id. A uuid column gets the name's UUID
// version 5 in the URL namespace (uuid5(NAMESPACE_URL, "bus-1") in any
// library); an integer column the number a name ends in (bus-7 → 7) when
// it fits, else a stable hash of the name from 1 to the type's maximum.
func (e EventIDs) ID(name string) string {
	switch e.kind {
	case idUUID:
		return uuidV5(namespaceURL, name)
	case idInteger:
		return strconv.FormatInt(intID(name, e.max), 10)
	}
	return name
}

// trailingDigits are the digits a name ends in: bus-7 → 7.
var trailingDigits = regexp.MustCompile(`[0-9]+$`)

func intID(name string, max int64) int64 {
	if d := trailingDigits.FindString(name); d != "" {
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
	s := hex.EncodeToString(u[:])
	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:]
}
