package bench

import (
	"context"
	"errors"
	"fmt"
	"github.com/outboxdrill/runner/pipeline"
	"net"
	neturl "net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/jetstream"
	"github.com/outboxdrill/runner/broker/kafka"
	"github.com/outboxdrill/runner/broker/rabbitmq"
	"github.com/outboxdrill/runner/internal/redact"
	aproxy "github.com/outboxdrill/runner/proxy/amqp"
	kproxy "github.com/outboxdrill/runner/proxy/kafka"
	nproxy "github.com/outboxdrill/runner/proxy/nats"
	"github.com/outboxdrill/runner/proxy/pgwire"
	"github.com/outboxdrill/runner/proxy/resp"
	"github.com/outboxdrill/runner/world"
)

// roundTrips are one protocol's round-trip times, direct and through an
// unarmed proxy.
type roundTrips struct {
	proto           string // PostgreSQL, Redis, NATS, RabbitMQ, Kafka
	what            string
	direct, proxied []time.Duration
	// bare: through a bare TCP forwarder (forward.go), interleaved with
	// the others; empty where none stands in (Kafka: its metadata sends
	// the client to the broker's own address). bareNA says why.
	bare   []time.Duration
	bareNA string
	// na is why there is no figure: the broker's server could not be had
	// on this machine, or the round trip failed.
	na string
}

// percentile of sorted durations (p in 0..100).
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[min(len(ds)-1, len(ds)*p/100)]
}

func (r roundTrips) figure() string {
	if r.na != "" {
		return "n/a"
	}
	slices.Sort(r.direct)
	slices.Sort(r.proxied)
	slices.Sort(r.bare)
	s := fmt.Sprintf("%s p50, %s p99", signedUS(percentile(r.proxied, 50)-percentile(r.direct, 50)), signedUS(percentile(r.proxied, 99)-percentile(r.direct, 99)))
	if len(r.bare) > 0 {
		bare := percentile(r.bare, 50) - percentile(r.direct, 50)
		s += fmt.Sprintf("; a bare forwarder %s p50", signedUS(bare))
		if bare > 0 {
			s += fmt.Sprintf(" (proxy/bare %.1f×)", float64(percentile(r.proxied, 50)-percentile(r.direct, 50))/float64(bare))
		}
	}
	return s
}

// signedUS is a difference: "+14 µs", "-466 µs" (a noisy p99 may favour
// the proxy).
func signedUS(d time.Duration) string {
	if d < 0 {
		return "-" + us(-d)
	}
	return "+" + us(d)
}

func (r roundTrips) note() string {
	if r.na != "" {
		return fmt.Sprintf("%s: %s", r.what, r.na)
	}
	slices.Sort(r.direct)
	slices.Sort(r.proxied)
	slices.Sort(r.bare)
	bare := "; " + r.bareNA
	if len(r.bare) > 0 {
		bare = fmt.Sprintf(", bare forwarder %s / %s", us(percentile(r.bare, 50)), us(percentile(r.bare, 99)))
	}
	return fmt.Sprintf("%s: direct %s / %s, proxied %s / %s%s (p50 / p99, %d each, interleaved)", r.what,
		us(percentile(r.direct, 50)), us(percentile(r.direct, 99)), us(percentile(r.proxied, 50)), us(percentile(r.proxied, 99)), bare, len(r.direct))
}

func us(d time.Duration) string { return fmt.Sprintf("%d µs", d.Microseconds()) }

// interleave times n round trips each way, direct, through the bare
// forwarder (bare nil: none) and proxied in turn, so that all see the
// same machine load.
func (r *roundTrips) interleave(ctx context.Context, n int, direct, proxied, bare func(context.Context) error) error {
	ways := []struct {
		name string
		f    func(context.Context) error
		to   *[]time.Duration
	}{{"direct", direct, &r.direct}, {"bare forwarder", bare, &r.bare}, {"proxied", proxied, &r.proxied}}
	for range n {
		for _, w := range ways {
			if w.f == nil {
				continue
			}
			start := time.Now()
			if err := w.f(ctx); err != nil {
				return fmt.Errorf("%s (%s): %w", r.what, w.name, err)
			}
			*w.to = append(*w.to, time.Since(start))
		}
	}
	return nil
}

// proxyLatency measures what the protocol proxies add to the round trip a
// drill's boundary sits on: SELECT 1 on PostgreSQL, PING on Redis, a
// JetStream publish and its PubAck, a RabbitMQ publish and its confirm, a
// Kafka Produce with acks=all; n of each, direct and proxied in turn. A
// broker whose server cannot be had here (neither given in p.URLs nor
// startable) gets its row with the reason instead of a figure.
func proxyLatency(ctx context.Context, p Params, n int) ([]roundTrips, error) {
	// The brokers' servers start while PostgreSQL and Redis do; nothing is
	// timed before all of them are up.
	servers := make([]*brokerServer, len(brokerRTs))
	var wg sync.WaitGroup
	for i, b := range brokerRTs {
		wg.Go(func() { servers[i] = openBrokerServer(ctx, p, b.kind) })
	}
	defer func() {
		wg.Wait()
		for _, s := range servers {
			s.close()
		}
	}()
	w, err := world.Open(ctx, &world.Config{PGURL: p.PGURL, URLs: map[string]string{pipeline.Broker: p.Redis}, Parallel: 1, ConnectTimeout: p.ConnectTimeout}, world.Shape{Brokers: []string{pipeline.Broker}})
	if err != nil {
		return nil, err
	}
	defer w.Close()
	wg.Wait() // a RabbitMQ booting would weigh on PostgreSQL's and Redis's figures
	pgRT, err := pgLatency(ctx, w, n)
	if err != nil {
		return nil, err
	}
	redisRT, err := redisLatency(ctx, w, n)
	if err != nil {
		return nil, err
	}
	out := []roundTrips{pgRT, redisRT}
	for i, b := range brokerRTs {
		rt := roundTrips{proto: b.kind.Title, what: b.what}
		s := servers[i]
		if s.kafkaLabel() {
			rt.what = b.kfake
		}
		err := s.err
		if err == nil {
			err = b.measure(ctx, s.url, n, &rt)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			rt.direct, rt.proxied = nil, nil
			rt.na = "not measured: " + oneLine(err.Error())
		}
		out = append(out, rt)
	}
	return out, nil
}

func pgLatency(ctx context.Context, w *world.World, n int) (roundTrips, error) {
	rt := roundTrips{proto: "PostgreSQL", what: "PostgreSQL SELECT 1"}
	pair, err := w.TakePair(ctx, pipeline.Broker)
	if err != nil {
		return rt, err
	}
	defer w.ReturnPair(ctx, pair)
	cc := pair.Env.Producer.Config().ConnConfig.Copy()
	pg, err := pgwire.Listen(net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))))
	if err != nil {
		return rt, err
	}
	defer pg.Close()
	direct, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return rt, err
	}
	defer direct.Close(ctx)
	host, port, _ := net.SplitHostPort(pg.Addr())
	pn, _ := strconv.Atoi(port)
	pcc := cc.Copy()
	pcc.Host, pcc.Port, pcc.TLSConfig, pcc.Fallbacks = host, uint16(pn), nil, nil
	proxied, err := pgx.ConnectConfig(ctx, pcc)
	if err != nil {
		return rt, err
	}
	defer proxied.Close(ctx)
	fw, err := forward(net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))))
	if err != nil {
		return rt, err
	}
	defer fw.Close()
	fhost, fport, _ := net.SplitHostPort(fw.Addr())
	fn, _ := strconv.Atoi(fport)
	fcc := pcc.Copy()
	fcc.Host, fcc.Port = fhost, uint16(fn)
	bare, err := pgx.ConnectConfig(ctx, fcc)
	if err != nil {
		return rt, err
	}
	defer bare.Close(ctx)
	selectOne := func(c *pgx.Conn) func(context.Context) error {
		return func(ctx context.Context) error { _, err := c.Exec(ctx, "SELECT 1"); return err }
	}
	return rt, rt.interleave(ctx, n, selectOne(direct), selectOne(proxied), selectOne(bare))
}

func redisLatency(ctx context.Context, w *world.World, n int) (roundTrips, error) {
	rt := roundTrips{proto: "Redis", what: "Redis PING"}
	opt := *w.RedisClient().Options()
	rp, err := resp.Listen(opt.Addr)
	if err != nil {
		return rt, err
	}
	defer rp.Close()
	fw, err := forward(opt.Addr)
	if err != nil {
		return rt, err
	}
	defer fw.Close()
	popt, fopt := opt, opt
	popt.Addr, fopt.Addr = rp.Addr(), fw.Addr()
	rd, rpx, rfw := redis.NewClient(&opt), redis.NewClient(&popt), redis.NewClient(&fopt)
	defer rd.Close()
	defer rpx.Close()
	defer rfw.Close()
	ping := func(c *redis.Client) func(context.Context) error {
		return func(ctx context.Context) error { return c.Ping(ctx).Err() }
	}
	return rt, rt.interleave(ctx, n, ping(rd), ping(rpx), ping(rfw))
}

// brokerRTs are the brokers' rows, in the order of broker/kinds.
var brokerRTs = []struct {
	kind        *broker.Kind
	what, kfake string // kfake: what when the server is the runner's kfake
	measure     func(ctx context.Context, url string, n int, rt *roundTrips) error
}{
	{kind: jetstream.Kind, what: "NATS JetStream publish + PubAck", measure: natsLatency},
	{kind: rabbitmq.Kind, what: "RabbitMQ basic.publish + confirm", measure: amqpLatency},
	{kind: kafka.Kind, what: "Kafka Produce acks=all", kfake: "Kafka (kfake) Produce acks=all", measure: kafkaLatency},
}

// brokerServer is one broker's server for the bench: given by URL, else
// the runner's own, started and opened as world.Open does it (the
// kind's Start and Open); err says why there is none.
type brokerServer struct {
	kind  *broker.Kind
	url   string
	label string // Host.SetLabel: "kafka (kfake)"
	err   error
	undo  []func(context.Context) error
}

func openBrokerServer(ctx context.Context, p Params, k *broker.Kind) *brokerServer {
	s := &brokerServer{kind: k}
	url := p.URLs[k.Name]
	var own broker.Process
	if url != "" {
		s.err = world.Probe(ctx, k.Name, url, p.ConnectTimeout)
	} else if url, own, s.err = k.Start(ctx, s); s.err != nil {
		s.err = fmt.Errorf("no --%s given and the runner's own %s did not start: %w", k.Flag, k.Title, s.err)
	}
	if s.err != nil {
		return s
	}
	s.url = url
	if _, s.err = k.Open(ctx, s, url, own); s.err != nil {
		s.err = fmt.Errorf("%s: %w", k.Title, s.err)
	}
	return s
}

// The broker.Host of Start and Open.
func (s *brokerServer) Defer(fn func(context.Context) error)     { s.undo = append(s.undo, fn) }
func (s *brokerServer) DeferStop(fn func(context.Context) error) { s.undo = append(s.undo, fn) }
func (s *brokerServer) Logf(string, ...any)                      {}
func (s *brokerServer) SetURL(url string)                        { s.url = url }
func (s *brokerServer) SetLabel(label string)                    { s.label = label }

// kafkaLabel: the server is the runner's kfake (its own or another run's).
func (s *brokerServer) kafkaLabel() bool { return s.label == kafka.KfakeLabel }

// close undoes what Start and Open did, newest first, even after Ctrl-C.
func (s *brokerServer) close() {
	if s == nil {
		return
	}
	for i := len(s.undo) - 1; i >= 0; i-- {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = s.undo[i](ctx)
		cancel()
	}
	s.undo = nil
}

// oneLine keeps a reason on the table's one row.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// cleanupCtx is for deleting a throwaway stream, queue or topic: it runs
// also when ctx is cancelled.
func cleanupCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
}

// throwaway names a stream, queue or topic of one bench run.
func throwaway(prefix string) string {
	return fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), time.Now().UnixNano())
}

// firstAddr is the host:port of url's first server.
func firstAddr(k *broker.Kind, url string) (string, error) {
	addrs, _, err := k.Probe.Addrs(url)
	if err != nil {
		return "", err
	}
	if len(addrs) == 0 {
		return "", fmt.Errorf("%s: no address", k.Title)
	}
	return addrs[0].Addr, nil
}

// natsLatency: a JetStream publish waiting for its PubAck, on a throwaway
// file-storage stream (the runner's streams are file storage).
func natsLatency(ctx context.Context, url string, n int, rt *roundTrips) error {
	upstream, err := firstAddr(jetstream.Kind, url)
	if err != nil {
		return err
	}
	px, err := nproxy.Listen(upstream)
	if err != nil {
		return err
	}
	defer px.Close()
	// The first server of url, and the same through the proxy (user info
	// kept): no other server of a cluster.
	u, err := neturl.Parse(strings.TrimSpace(strings.Split(url, ",")[0]))
	if err != nil {
		return errors.New("not a NATS URL")
	}
	u.Host = upstream
	fw, err := forward(upstream)
	if err != nil {
		return err
	}
	defer fw.Close()
	var js [3]natsjs.JetStream
	for i, host := range []string{upstream, px.Addr(), fw.Addr()} {
		cu := *u
		cu.Host = host
		nc, err := nats.Connect(cu.String(), nats.Name("outboxdrill-bench"), nats.Timeout(5*time.Second), nats.NoReconnect())
		if err != nil {
			return redact.Err(url, err)
		}
		defer nc.Close()
		if js[i], err = natsjs.New(nc); err != nil {
			return err
		}
	}
	name := throwaway("PROXY_BENCH")
	if _, err := js[0].CreateStream(ctx, natsjs.StreamConfig{Name: name, Subjects: []string{name}, Storage: natsjs.FileStorage}); err != nil {
		return fmt.Errorf("create stream: %w", err)
	}
	defer func() {
		cctx, cancel := cleanupCtx(ctx)
		defer cancel()
		_ = js[0].DeleteStream(cctx, name)
	}()
	publish := func(js natsjs.JetStream) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := js.Publish(ctx, name, []byte("e"), natsjs.WithExpectStream(name))
			return err
		}
	}
	return rt.interleave(ctx, n, publish(js[0]), publish(js[1]), publish(js[2]))
}

// amqpLatency: basic.publish (persistent, mandatory, as the relay
// publishes) on a confirm-mode channel, waiting for the confirm, into a
// throwaway exclusive auto-delete queue.
func amqpLatency(ctx context.Context, url string, n int, rt *roundTrips) error {
	upstream, err := firstAddr(rabbitmq.Kind, url)
	if err != nil {
		return err
	}
	u, err := neturl.Parse(url)
	if err != nil {
		return errors.New("not a RabbitMQ URL")
	}
	if u.Scheme != "amqp" {
		return fmt.Errorf("%s://: the proxy speaks plain AMQP only", u.Scheme)
	}
	px, err := aproxy.Listen(upstream)
	if err != nil {
		return err
	}
	defer px.Close()
	fw, err := forward(upstream)
	if err != nil {
		return err
	}
	defer fw.Close()
	var chs [3]*amqp.Channel
	for i, host := range []string{upstream, px.Addr(), fw.Addr()} {
		cu := *u
		cu.Host = host
		c, err := amqp.DialConfig(cu.String(), amqp.Config{Dial: amqp.DefaultDial(5 * time.Second), Properties: amqp.Table{"connection_name": "outboxdrill-bench"}})
		if err != nil {
			return redact.Err(url, err)
		}
		defer c.Close()
		if chs[i], err = c.Channel(); err != nil {
			return err
		}
		if err := chs[i].Confirm(false); err != nil {
			return err
		}
	}
	// Exclusive to the direct connection, which publishes to it; the
	// proxied one reaches it all the same (publishing is not consuming).
	// It goes with that connection at the latest.
	q, err := chs[0].QueueDeclare(throwaway("proxy-bench"), false, true, true, false, nil)
	if err != nil {
		return fmt.Errorf("declare queue: %w", err)
	}
	defer func() { _, _ = chs[0].QueueDelete(q.Name, false, false, false) }()
	publish := func(ch *amqp.Channel) func(context.Context) error {
		return func(ctx context.Context) error {
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q.Name, true, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("e")})
			if err != nil {
				return err
			}
			ok, err := dc.WaitContext(ctx)
			if err == nil && !ok {
				err = errors.New("nacked")
			}
			return err
		}
	}
	return rt.interleave(ctx, n, publish(chs[0]), publish(chs[1]), publish(chs[2]))
}

// kafkaLatency: a Produce with acks=all and no linger, as the relay's
// producer sends it, to a throwaway one-partition topic.
func kafkaLatency(ctx context.Context, url string, n int, rt *roundTrips) error {
	seeds, err := kafka.Seeds(url)
	if err != nil {
		return err
	}
	px, err := kproxy.Listen(seeds[0])
	if err != nil {
		return err
	}
	defer px.Close()
	topic := throwaway("proxy-bench")
	var cls [2]*kgo.Client
	for i, seeds := range [][]string{seeds, {px.Addr()}} {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.ProducerLinger(0), kgo.RecordDeliveryTimeout(5*time.Second), kgo.DialTimeout(5*time.Second))
		if err != nil {
			return err
		}
		defer cl.Close()
		cls[i] = cl
	}
	adm := kadm.NewClient(cls[0])
	resp, err := adm.CreateTopic(ctx, 1, -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("create topic: %w", err)
	}
	defer func() {
		cctx, cancel := cleanupCtx(ctx)
		defer cancel()
		_, _ = adm.DeleteTopics(cctx, topic)
	}()
	produce := func(cl *kgo.Client) func(context.Context) error {
		return func(ctx context.Context) error {
			return cl.ProduceSync(ctx, &kgo.Record{Key: []byte("e"), Value: []byte("e")}).FirstErr()
		}
	}
	for _, cl := range cls { // connections, metadata and producer id before the clock
		if err := produce(cl)(ctx); err != nil {
			return err
		}
	}
	rt.bareNA = "no bare forwarder: Kafka's metadata sends a client to the broker's own address, which only the proxy rewrites"
	return rt.interleave(ctx, n, produce(cls[0]), produce(cls[1]), nil)
}
