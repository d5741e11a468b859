package resp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/proxy/fault"
)

func TestMain(m *testing.M) { testservers.Main(m) }

var seq atomic.Int64

type fixture struct {
	t      *testing.T
	proxy  *Proxy
	direct *redis.Client
	opts   *redis.Options
	stream string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	opts, err := redis.ParseURL(testservers.Redis(t))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Listen(opts.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	direct := redis.NewClient(opts)
	f := &fixture{t: t, proxy: p, direct: direct, opts: opts, stream: fmt.Sprintf("resp-proxy-test:%d:%d", time.Now().UnixNano(), seq.Add(1))}
	t.Cleanup(func() { direct.Del(context.Background(), f.stream); direct.Close() })
	return f
}

// client connects through the proxy speaking RESP protocol version proto.
func (f *fixture) client(proto int) *redis.Client {
	o := *f.opts
	o.Addr, o.Protocol, o.MaxRetries, o.PoolSize = f.proxy.Addr(), proto, -1, 1
	c := redis.NewClient(&o)
	f.t.Cleanup(func() { c.Close() })
	return c
}

func (f *fixture) arm(tr fault.Trigger) *Armed {
	f.t.Helper()
	a, err := f.proxy.Arm(tr)
	if err != nil {
		f.t.Fatal(err)
	}
	return a
}

func (f *fixture) entries() []string {
	f.t.Helper()
	msgs, err := f.direct.XRange(context.Background(), f.stream, "-", "+").Result()
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for _, m := range msgs {
		out = append(out, fmt.Sprint(m.Values["event_id"]))
	}
	return out
}

func xadd(ctx context.Context, c redis.Cmdable, stream, event string) *redis.StringCmd {
	return c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"event_id", event}})
}

func TestRelaysAndRecordsTheHistory(t *testing.T) {
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("resp%d", proto), func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			c := f.client(proto)
			id, err := xadd(ctx, c, f.stream, "e1").Result()
			if err != nil {
				t.Fatal(err)
			}
			if err := c.XGroupCreate(ctx, f.stream, "g", "0").Err(); err != nil {
				t.Fatal(err)
			}
			got, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "w1", Streams: []string{f.stream, ">"}, Count: 10, Block: -1}).Result()
			if err != nil || len(got) != 1 || len(got[0].Messages) != 1 {
				t.Fatalf("xreadgroup through the proxy: %v %v", got, err)
			}
			if err := c.XAck(ctx, f.stream, "g", id).Err(); err != nil {
				t.Fatal(err)
			}
			pubs, dels, acks := f.proxy.History()
			want := []string{"e1 " + id, "g w1 " + id + " e1", "g " + id + " 1"}
			var have []string
			for _, p := range pubs {
				have = append(have, p.Fields["event_id"]+" "+p.ID)
			}
			for _, d := range dels {
				have = append(have, d.Group+" "+d.Consumer+" "+d.ID+" "+d.Fields["event_id"])
			}
			for _, a := range acks {
				have = append(have, a.Group+" "+strings.Join(a.IDs, ",")+" "+a.Acked)
			}
			if diff := cmp.Diff(want, have); diff != "" {
				t.Errorf("history (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReplyKillRunsTheCommandAndHoldsItsReply(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var kills atomic.Int32
	a := f.arm(fault.Trigger{Link: fault.Broker, Boundary: fault.Reply, Filter: fault.Filter{Command: "XADD"}, Nth: 2, Action: fault.Action{Do: fault.Kill, Kill: func() error { kills.Add(1); return nil }}})
	c := f.client(3)
	if err := xadd(ctx, c, f.stream, "e1").Err(); err != nil {
		t.Fatal(err)
	}
	// A pipeline: the barrier keeps e3 from Redis once e2's reply is held.
	pipe := c.Pipeline()
	xadd(ctx, pipe, f.stream, "e2")
	xadd(ctx, pipe, f.stream, "e3")
	if _, err := pipe.Exec(ctx); err == nil {
		t.Fatal("the pipeline succeeded: the reply was not held")
	}
	<-a.Done()
	if kills.Load() != 1 || !a.Fired() || a.Err() != nil {
		t.Fatalf("kills=%d fired=%v err=%v", kills.Load(), a.Fired(), a.Err())
	}
	if diff := cmp.Diff([]string{"e1", "e2"}, f.entries()); diff != "" {
		t.Errorf("stream (-want +got): e2 was run, e3 never sent\n%s", diff)
	}
	// The record names the fault in the system file's words.
	struck := slices.IndexFunc(f.proxy.Events(), func(e Event) bool { return e.Fault != "" })
	if struck < 0 || f.proxy.Events()[struck].Fault != "broker.reply(XADD) nth=2 do=kill" {
		t.Errorf("events %+v: want the strike recorded as broker.reply(XADD) nth=2 do=kill", f.proxy.Events())
	}
}

// The runner hands each proxy the triggers of its own link: another's is
// refused, never armed to wait for a boundary this proxy never sees.
func TestArmRefusesAnotherLinksTrigger(t *testing.T) {
	f := newFixture(t)
	_, err := f.proxy.Arm(fault.Trigger{Link: fault.ConsumerDB, Boundary: fault.Commit, Action: fault.Action{Do: fault.Cut}})
	if err == nil || !strings.Contains(err.Error(), "consumer_db.commit() is not the broker link's trigger") {
		t.Errorf("a consumer_db trigger on the Redis proxy: %v", err)
	}
}

func TestRequestFaultsNeverReachRedis(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	c := f.client(2)
	kill := f.arm(fault.Trigger{Link: fault.Broker, Boundary: fault.Request, Filter: fault.Filter{Command: "XADD"}, Action: fault.Action{Do: fault.Kill, Kill: func() error { return nil }}})
	if err := xadd(ctx, c, f.stream, "k").Err(); err == nil {
		t.Fatal("a killed XADD succeeded")
	}
	<-kill.Done()
	fail := f.arm(fault.Trigger{Link: fault.Broker, Boundary: fault.Reply, Filter: fault.Filter{Command: "XADD"}, Action: fault.Action{Do: fault.Error}})
	err := xadd(ctx, c, f.stream, "x").Err()
	if err == nil || !strings.Contains(err.Error(), "outboxdrill") {
		t.Fatalf("error fault: %v; want the drill's -ERR", err)
	}
	<-fail.Done()
	if err := xadd(ctx, c, f.stream, "ok").Err(); err != nil {
		t.Fatalf("the connection after an -ERR: %v", err)
	}
	if diff := cmp.Diff([]string{"ok"}, f.entries()); diff != "" {
		t.Errorf("stream (-want +got):\n%s", diff)
	}
}

func TestDelayAndMulti(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	c := f.client(3)
	d := f.arm(fault.Trigger{Link: fault.Broker, Boundary: fault.Reply, Filter: fault.Filter{Command: "XADD"}, Action: fault.Action{Do: fault.Delay, Delay: 120 * time.Millisecond}})
	start := time.Now()
	if err := xadd(ctx, c, f.stream, "d").Err(); err != nil || time.Since(start) < 120*time.Millisecond {
		t.Fatalf("delayed XADD: %v after %v", err, time.Since(start))
	}
	<-d.Done()
	m := f.arm(fault.Trigger{Link: fault.Broker, Boundary: fault.Reply, Filter: fault.Filter{Command: "XADD"}, Action: fault.Action{Do: fault.Cut}})
	tx := c.TxPipeline()
	xadd(ctx, tx, f.stream, "m")
	if _, err := tx.Exec(ctx); err != nil {
		t.Fatalf("MULTI/EXEC must pass untouched: %v", err)
	}
	<-m.Done()
	var u *fault.Unclassifiable
	if m.Fired() || !errors.As(m.Err(), &u) {
		t.Errorf("XADD in MULTI: fired=%v err=%v; want *Unclassifiable", m.Fired(), m.Err())
	}
}

func TestValues(t *testing.T) {
	in := "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n" + "PING  x\r\n" +
		"|1\r\n+ttl\r\n:3\r\n%1\r\n+a\r\n~2\r\n:1\r\n,1.5\r\n" + "_\r\n" + "$-1\r\n" + "=7\r\ntxt:abc\r\n" + ">2\r\n+message\r\n#t\r\n"
	r := newReader(strings.NewReader(in))
	for _, want := range [][]string{{"GET", "k"}, {"PING", "x"}} {
		got, raw, err := r.command()
		if err != nil || !cmp.Equal(got, want) || len(raw) == 0 {
			t.Fatalf("command: %q %v, want %q", got, err, want)
		}
	}
	var all bytes.Buffer
	for _, want := range []string{"[a [1 1.5]]", "(nil)", "(nil)", "txt:abc", "[message t]"} {
		v, raw, err := r.next()
		if err != nil || v.String() != want {
			t.Fatalf("value %q %v, want %q", v, err, want)
		}
		all.Write(raw)
	}
	if !strings.HasSuffix(in, all.String()) || !strings.HasPrefix(all.String(), "|1") {
		t.Errorf("raw bytes %q are not the input's", all.String())
	}
}

// BenchmarkXAdd measures what the proxy adds to an XADD round trip,
// unarmed and with a trigger armed on another command (matched and
// counted on every command, never struck).
func BenchmarkXAdd(b *testing.B) {
	opts, err := redis.ParseURL(testservers.Redis(b))
	if err != nil {
		b.Fatal(err)
	}
	p, err := Listen(opts.Addr)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	stream := fmt.Sprintf("resp-proxy-bench:%d", time.Now().UnixNano())
	for _, mode := range []string{"direct", "proxy", "proxy-armed"} {
		b.Run(mode, func(b *testing.B) {
			o := *opts
			if mode != "direct" {
				o.Addr = p.Addr()
			}
			if mode == "proxy-armed" {
				if _, err := p.Arm(fault.Trigger{Link: fault.Broker, Boundary: fault.Reply, Filter: fault.Filter{Command: "XACK"}, Action: fault.Action{Do: fault.Cut}}); err != nil {
					b.Fatal(err)
				}
			}
			c := redis.NewClient(&o)
			defer c.Close()
			for b.Loop() {
				if err := xadd(ctx, c, stream, "e").Err(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	redis.NewClient(opts).Del(ctx, stream)
}
