package cdc_test

import (
	"fmt"
	"testing"

	"github.com/outboxdrill/runner/cdc"
)

// BenchmarkRelayOne is one pass relaying one just-committed event (the
// commit outside the timer), on a kept connection and on a new one each.
func BenchmarkRelayOne(b *testing.B) {
	for _, keep := range []bool{true, false} {
		b.Run(fmt.Sprintf("keep=%v", keep), func(b *testing.B) {
			db, slot, br := setup(b)
			n := 0
			for b.Loop() {
				b.StopTimer()
				n++
				produce(b, db, fmt.Sprintf("e%d", n))
				b.StartTimer()
				res, err := slot.Relay(b.Context(), br, cdc.RelayOptions{Keep: keep})
				if err != nil || len(res.Published) != 1 {
					b.Fatalf("%+v, %v", res, err)
				}
			}
		})
	}
}

// BenchmarkRelayBacklog is one pass relaying 2,000 events committed before
// it (the commits outside the timer); a kept connection was open while
// they were committed, as a running relay's is.
func BenchmarkRelayBacklog(b *testing.B) {
	for _, keep := range []bool{true, false} {
		b.Run(fmt.Sprintf("keep=%v", keep), func(b *testing.B) {
			db, slot, br := setup(b)
			if _, err := slot.Relay(b.Context(), br, cdc.RelayOptions{Keep: keep}); err != nil {
				b.Fatal(err)
			}
			n := 0
			for b.Loop() {
				b.StopTimer()
				var ids []string
				for range 2000 {
					n++
					ids = append(ids, fmt.Sprintf("e%d", n))
				}
				produce(b, db, ids...)
				b.StartTimer()
				res, err := slot.Relay(b.Context(), br, cdc.RelayOptions{Keep: keep})
				if err != nil || len(res.Published) != 2000 {
					b.Fatalf("%d published, %v", len(res.Published), err)
				}
			}
			b.ReportMetric(float64(2000*b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
