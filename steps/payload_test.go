package steps

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/outboxdrill/runner/pipeline"
	"github.com/outboxdrill/runner/system"
)

// The system file checks a path into the runner's own payload (no
// event.payload) against system.OwnPayloadFields at load: they must be
// the fields that payload has, every one set.
func TestOwnPayloadFieldsAreTheRunnersPayload(t *testing.T) {
	full := pipeline.Transfer{EventID: "bus-1", From: "a", To: "b", Amount: 1, Currency: "USD", Aggregate: "acct-1", Version: 1}
	var doc map[string]any
	if err := json.Unmarshal([]byte(full.Payload()), &doc); err != nil {
		t.Fatal(err)
	}
	got, want := slices.Sorted(maps.Keys(doc)), slices.Sorted(slices.Values(system.OwnPayloadFields))
	if !slices.Equal(got, want) {
		t.Errorf("the runner's own payload has %v; system.OwnPayloadFields says %v", got, want)
	}
}
