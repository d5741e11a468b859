package schema

import (
	"regexp"
	"strings"
	"testing"
)

// TestResetEmptiesEveryTable guards isolation: a table added to a schema
// but not to its reset would leak rows from one scenario into the next.
func TestResetEmptiesEveryTable(t *testing.T) {
	table := regexp.MustCompile(`(?m)^CREATE TABLE (\w+)`)
	for _, c := range []struct{ name, schema, reset string }{
		{"producer", Producer, ResetProducer},
		{"consumer", Consumer, ResetConsumer},
	} {
		for _, m := range table.FindAllStringSubmatch(c.schema, -1) {
			if !strings.Contains(c.reset, "DELETE FROM "+m[1]+";") && !strings.HasSuffix(c.reset, "DELETE FROM "+m[1]) {
				t.Errorf("%s reset does not empty table %s", c.name, m[1])
			}
		}
	}
}
