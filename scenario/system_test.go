package scenario

import (
	"strings"
	"testing"
)

// A service's placeholders (${stream}, ${consumer}, a proxy's URL) are
// filled when the service starts; a misspelt one is still an error.
func TestServicePlaceholdersWaitForTheStart(t *testing.T) {
	scs, errs := Parse("t.yaml", []byte(`name: n
steps:
  - start: {service: relay, env: {S: "${stream}", U: "${producer_db.url}"}}
`))
	if len(errs) > 0 || len(scs) != 1 {
		t.Fatalf("errors %v", errs)
	}
	if got := scs[0].Steps[0].ParamValues()["env"].(map[string]string)["S"]; got != "${stream}" {
		t.Errorf("env S = %q; want ${stream} left for the start", got)
	}
	_, errs = Parse("t.yaml", []byte(`name: n
steps:
  - start: {service: relay, env: {S: "${strem}"}}
`))
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), `undefined variable "strem" (did you mean "stream"?)`) {
		t.Errorf("a misspelt placeholder: %v", errs)
	}
}
