package system

import (
	"strings"
	"testing"
)

func TestEventIDs(t *testing.T) {
	uuid, err := NewEventIDs("outbox.event_id", "uuid")
	if err != nil {
		t.Fatal(err)
	}
	// Python: uuid.uuid5(uuid.NAMESPACE_URL, "bus-1").
	if got := uuid.ID("bus-1"); got != "e932ed03-a1db-55cf-8f50-49f09012efe8" {
		t.Errorf("uuid of bus-1: %s", got)
	}
	if uuid.ID("bus-1") != uuid.ID("bus-1") || uuid.ID("bus-1") == uuid.ID("bus-2") || uuid.Names() {
		t.Error("uuids are not a stable, distinct mapping")
	}
	big, _ := NewEventIDs("outbox.event_id", "bigint")
	small, _ := NewEventIDs("outbox.event_id", "smallint")
	for _, c := range []struct {
		ids  EventIDs
		name string
		want string
	}{
		{big, "bus-1", "1"}, {big, "bus-42", "42"}, {small, "bus-40000", ""}, {big, "refund", ""},
	} {
		got := c.ids.ID(c.name)
		if c.want != "" && got != c.want {
			t.Errorf("%s id of %s: %s, want %s", c.ids.Type, c.name, got, c.want)
		}
		if got != c.ids.ID(c.name) || got == "0" || strings.HasPrefix(got, "-") {
			t.Errorf("%s id of %s: %s is not a stable positive number", c.ids.Type, c.name, got)
		}
	}
	if got := small.ID("bus-40000"); len(got) > 5 || got > "32767" && len(got) == 5 {
		t.Errorf("smallint id %s does not fit", got)
	}
	text, _ := NewEventIDs("outbox.event_id", "character varying")
	if !text.Names() || text.ID("bus-1") != "bus-1" || (EventIDs{}).ID("bus-1") != "bus-1" {
		t.Error("a text column keeps the names")
	}
	if _, err := NewEventIDs("outbox.event_id", "numeric"); err == nil || !strings.Contains(err.Error(), "outbox.event_id is of type numeric: the runner can give event ids to a text, uuid, smallint, integer or bigint column only") {
		t.Errorf("numeric: %v", err)
	}
}

// A name that already is a value of the column's type is used as written,
// in PostgreSQL's canonical form; every other name is mapped.
func TestEventIDsKeepOwnValues(t *testing.T) {
	uuid, _ := NewEventIDs("outbox.event_id", "uuid")
	small, _ := NewEventIDs("outbox.event_id", "smallint")
	big, _ := NewEventIDs("outbox.event_id", "bigint")
	const own = "add84b1d-f0ae-4095-94d0-fd632fac70a4"
	for _, c := range []struct {
		ids        EventIDs
		name, want string
	}{
		{uuid, own, own},
		{uuid, "ADD84B1D-F0AE-4095-94D0-FD632FAC70A4", own},
		{uuid, "{add84b1d-f0ae-4095-94d0-fd632fac70a4}", own},
		{uuid, "add84b1df0ae409594d0fd632fac70a4", own},
		{uuid, "add8-4b1d-f0ae-4095-94d0-fd63-2fac-70a4", own}, // a hyphen after any four digits, as PostgreSQL takes it
		{uuid, "bus-1", "e932ed03-a1db-55cf-8f50-49f09012efe8"},
		// Not quite a UUID: a name, mapped.
		{uuid, "add84b1d-f0ae-4095-94d0-fd632fac70a", uuidV5(namespaceURL, "add84b1d-f0ae-4095-94d0-fd632fac70a")},
		{uuid, "add84b1d-f0ae-4095-94d0-fd632fac70a4}", uuidV5(namespaceURL, "add84b1d-f0ae-4095-94d0-fd632fac70a4}")},
		{uuid, "add84b1d--f0ae-4095-94d0-fd632fac70a4", uuidV5(namespaceURL, "add84b1d--f0ae-4095-94d0-fd632fac70a4")},
		{uuid, "+dd84b1d-f0ae-4095-94d0-fd632fac70a4", uuidV5(namespaceURL, "+dd84b1d-f0ae-4095-94d0-fd632fac70a4")},
		{big, "42", "42"}, {big, "0", "0"}, {big, "-7", "-7"}, {big, "+7", "7"}, {big, "007", "7"},
		{big, "9223372036854775807", "9223372036854775807"},
		{small, "-32768", "-32768"}, {small, "32767", "32767"},
	} {
		if got := c.ids.ID(c.name); got != c.want {
			t.Errorf("%s id of %q: %s, want %s", c.ids.Type, c.name, got, c.want)
		}
	}
	// Out of range, or not a plain decimal: names, mapped to 1..max.
	for _, c := range []struct {
		ids  EventIDs
		name string
	}{{small, "32768"}, {small, "-32769"}, {big, "9223372036854775808"}, {big, "1e3"}, {big, "0x10"}, {big, "1_000"}, {big, "--1"}, {big, " 5"}} {
		got := c.ids.ID(c.name)
		if got == c.name || got == "0" || strings.HasPrefix(got, "-") {
			t.Errorf("%s id of %q: %s, want it mapped to a positive number", c.ids.Type, c.name, got)
		}
	}
}
