package scenario

import (
	"strings"
	"testing"
)

// Consumer handling is one validated choice: parameters that cannot all
// hold are a load error at the clashing parameter, naming both.
func TestHandlingClashesAreLoadErrors(t *testing.T) {
	for step, want := range map[string]string{
		"consume(ordering=strict, mode=split_tx, dedupe=setnx)":      "x.yaml:3:30: ordering: strict and mode: split_tx cannot both hold",
		"consume: {ordering: strict, mode: split_tx, fail: divzero}": "x.yaml:3:33: ordering: strict and mode: split_tx cannot both hold",
		"claim(ordering=strict, dedupe=setnx)":                       "x.yaml:3:28: ordering: strict and dedupe: setnx cannot both hold",
		"consume(dedupe=setnx, mode=split_tx)":                       "x.yaml:3:27: dedupe: setnx and mode: split_tx cannot both hold",
		"consume(mode=ack_first, skip_ack)":                          "x.yaml:3:29: mode: ack_first and skip_ack: true cannot both hold",
		"claim(mode=ack_first, max_deliveries=2)":                    "x.yaml:3:27: mode: ack_first and max_deliveries: 2 cannot both hold",
	} {
		_, errs := Parse("x.yaml", []byte("name: x\nsteps:\n  - "+step+"\n"), testKinds)
		if len(errs) != 1 || !strings.Contains(errs.Error(), want) {
			t.Errorf("%s:\n got %v\nwant one error containing %q", step, errs, want)
		}
	}
	for _, ok := range []string{"consume(ordering=strict, dedupe=entry_id, fail=divzero)", "consume(mode=split_tx, fail=divzero)",
		"consume(dedupe=setnx, fail=divzero)", "consume(mode=ack_first, fail=divzero)", "claim(skip_ack, max_deliveries=3)"} {
		if _, errs := Parse("x.yaml", []byte("name: x\nsteps:\n  - "+ok+"\n"), testKinds); len(errs) > 0 {
			t.Errorf("%s: want no error, got %v", ok, errs)
		}
	}
}
