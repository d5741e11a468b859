package resp

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// IdlePoll is the send time of the latest XREADGROUP of new entries that
// handed out nothing: never one that handed out an entry, nor a read of
// the client's own pending entries, in either protocol version.
func TestIdlePollIsAReadOfNewWorkThatFoundNone(t *testing.T) {
	t.Parallel()
	for _, proto := range []int{2, 3} {
		f := newFixture(t)
		ctx := context.Background()
		c := f.client(proto)
		if err := c.XGroupCreateMkStream(ctx, f.stream, "g", "0").Err(); err != nil {
			t.Fatal(err)
		}
		read := func(id string) {
			t.Helper()
			err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "w", Streams: []string{f.stream, id}, Count: 10, Block: 10 * time.Millisecond}).Err()
			if err != nil && err != redis.Nil {
				t.Fatal(err)
			}
		}
		if !f.proxy.IdlePoll().IsZero() {
			t.Fatalf("RESP%d: an idle poll before any read", proto)
		}
		if err := xadd(ctx, f.direct, f.stream, "ev-1").Err(); err != nil {
			t.Fatal(err)
		}
		read(">") // hands out ev-1
		read("0") // its own pending entry: not a read of new work
		if got := f.proxy.IdlePoll(); !got.IsZero() {
			t.Fatalf("RESP%d: idle poll at %v after reads that handed out entries or read the pending ones", proto, got)
		}
		before := time.Now()
		read(">") // nothing new: BLOCK runs out
		got := f.proxy.IdlePoll()
		if got.Before(before) || got.After(time.Now()) {
			t.Fatalf("RESP%d: idle poll at %v, want the send time of the read after %v", proto, got, before)
		}
		read("0")
		if err := xadd(ctx, f.direct, f.stream, "ev-2").Err(); err != nil {
			t.Fatal(err)
		}
		read(">")
		if f.proxy.IdlePoll() != got {
			t.Fatalf("RESP%d: the idle poll moved on reads that were not idle", proto)
		}
	}
}
