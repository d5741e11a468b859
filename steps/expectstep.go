package steps

import (
	"context"
	"strings"
)

const expectStep = "expect"

// ExpectParams are the parameters of the expect step: none, its map holds
// state checks.
type ExpectParams struct{}

func expectDefs() []*Def {
	return []*Def{
		Define(expectStep, "Check the state of the databases and the stream. Its map holds state checks (see below).",
			nil, func(context.Context, *Env, *ExpectParams) (Result, error) { return Result{}, nil }),
	}
}

// Draw notes the checks that held (a failed one is drawn by the runner).
func (*ExpectParams) Draw(d Diagram, r Result) {
	var ok []string
	for _, ob := range r.Observed {
		if ob.OK {
			ok = append(ok, ob.Key)
		}
	}
	if len(ok) > 0 {
		d.Note("expect ok: "+strings.Join(ok, ", "), ProducerDB, ConsumerDB)
	}
}

func (*ExpectParams) FaultSite() Participant { return ConsumerDB }
