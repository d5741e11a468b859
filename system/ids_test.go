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
