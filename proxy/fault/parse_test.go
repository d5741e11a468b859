package fault_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/outboxdrill/runner/broker"
	_ "github.com/outboxdrill/runner/broker/kinds"
	"github.com/outboxdrill/runner/proxy/fault"
)

// dialects are every broker's, as the loaders judge a fault.
func dialects() []fault.Dialect { return broker.Dialects(broker.Kinds()) }

// parseOn loads a fault on on (nth 1, do kill) with every broker's
// dialect: its trigger's place, and its first problem about on:.
func parseOn(on string) (fault.Trigger, *fault.Fault, error) {
	f, probs := fault.Load(fault.Spec{On: on, Nth: 1, Do: "kill"}, dialects())
	t := f.Trigger
	t.Nth, t.Action = 0, fault.Action{}
	for _, p := range probs {
		if p.Key == "on" {
			return t, f, p.Err
		}
	}
	return t, f, nil
}

func TestParseTrigger(t *testing.T) {
	table := func(l fault.Link, b fault.Boundary, name string) fault.Trigger {
		return fault.Trigger{Link: l, Boundary: b, Filter: fault.Filter{Table: name}}
	}
	command := func(b fault.Boundary, cmd string) fault.Trigger {
		return fault.Trigger{Link: fault.Broker, Boundary: b, Filter: fault.Filter{Command: cmd}}
	}
	for on, want := range map[string]fault.Trigger{
		"consumer_db.commit(table=inbox)":     table(fault.ConsumerDB, fault.Commit, "inbox"),
		"producer_db.statement()":             table(fault.ProducerDB, fault.Statement, ""),
		"broker.reply(xadd)":                  command(fault.Reply, "XADD"),
		" broker.request(XACK) ":              command(fault.Request, "XACK"),
		"broker.request(xgroup.create)":       command(fault.Request, "XGROUP.CREATE"),
		"broker.reply(CLIENT.NO-EVICT)":       command(fault.Reply, "CLIENT.NO-EVICT"),
		"broker.reply(publish)":               command(fault.Reply, "publish"),
		"broker.request(ack)":                 command(fault.Request, "ack"),
		"broker.reply(Produce)":               command(fault.Reply, "Produce"),
		"broker.request(basic.ack)":           command(fault.Request, "basic.ack"),
		"broker.request(+ACK)":                command(fault.Request, "+ACK"),
		"broker.reply(publish, topic=orders)": {Link: fault.Broker, Boundary: fault.Reply, Filter: fault.Filter{Command: "publish", Topic: "orders"}},
	} {
		got, _, err := parseOn(on)
		if diff := cmp.Diff(want, got); err != nil || diff != "" {
			t.Errorf("%q: %v (-want +got):\n%s", on, err, diff)
		}
		if again, _, _ := parseOn(got.On()); !cmp.Equal(again, got) {
			t.Errorf("%q does not read back: %q", on, got.On())
		}
	}
	for on, want := range map[string]string{
		"consumer_db.comit(table=inbox)":      `consumer_db has no boundary "comit" (did you mean "commit"?)`,
		"consumerdb.commit()":                 `unknown link "consumerdb" (did you mean "consumer_db"?)`,
		"broker.reply()":                      "broker.reply needs the command",
		"consumer_db.commit(inbox)":           "takes (table=NAME) or ()",
		"consumer_db.commit(tabel=inbox)":     `takes (table=NAME) or (); got (tabel=inbox) (did you mean "table"?)`,
		"commit":                              "want <link>.<boundary>(<filter>)",
		"broker.reply(XAD)":                   `broker.reply(XAD): no Redis command XAD (did you mean "XADD"?)`,
		"broker.request(xreadgrop)":           `no Redis command XREADGROP (did you mean "XREADGROUP"?)`,
		"broker.request(XGROUP.CRATE)":        `Redis command XGROUP has no subcommand CRATE (did you mean "CREATE"?); it has: CREATE, CREATECONSUMER`,
		"broker.reply(XADD.NOMKSTREAM)":       "Redis command XADD has no subcommands",
		"broker.reply(Produc)":                `nor another broker's operation (did you mean "Produce"?)`,
		"broker.reply(publish, topik=orders)": `(did you mean "topic"?)`,
		"broker.reply(XADD, topic=orders)":    "suits no broker's proxy (redis: the Redis proxy filters by command only",
	} {
		if _, _, err := parseOn(on); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v; want %q", on, err, want)
		}
	}
}

func TestParseAction(t *testing.T) {
	if a, err := fault.ParseAction("delay(250ms)"); err != nil || a.Do != fault.Delay || a.Delay != 250*time.Millisecond {
		t.Errorf("delay: %+v %v", a, err)
	}
	if a, err := fault.ParseAction("kill"); err != nil || a.Do != fault.Kill {
		t.Errorf("kill: %+v %v", a, err)
	}
	for do, want := range map[string]string{"kil": `unknown action "kil" (did you mean "kill"?)`, "delay(-1s)": "positive duration", "delay(x)": "positive duration"} {
		if _, err := fault.ParseAction(do); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v; want %q", do, err, want)
		}
	}
}

// A trigger no broker's proxy takes is an UnsuitedError carrying it as
// read; compiled for one broker, it says why there, in that broker's
// words (For(b).Skip).
func TestCompiledSaysWhyInTheBrokersWords(t *testing.T) {
	_, _, err := parseOn("broker.reply(PUBLSH)")
	var un *fault.UnsuitedError
	if !errors.As(err, &un) || un.Trigger.Filter.Command != "PUBLSH" || un.Trigger.Link != fault.Broker {
		t.Fatalf("an operation no broker has: %v, want an UnsuitedError with the trigger", err)
	}
	for _, c := range []struct{ on, b, want string }{
		{"broker.reply(PUBLSH)", "kafka", `unknown operation "PUBLSH" (want publish, deliver, ack or a Kafka API such as Produce) (did you mean "publish"?)`},
		{"broker.reply(PUBLSH)", "redis", `no Redis command PUBLSH (did you mean "PUBLISH"?)`},
		{"broker.reply(Produce)", "redis", "no Redis command PRODUCE; Produce is an operation of kafka"},
		{"broker.reply(XADD)", "nats", "; XADD is an operation of redis"},
		{"broker.request(basic.ack)", "rabbitmq", ""},
		{"broker.reply(publish)", "kafka", ""},
	} {
		_, f, _ := parseOn(c.on)
		compiled, ok := f.For(c.b)
		got := compiled.Skip
		if !ok || c.want == "" && got != nil || c.want != "" && (got == nil || !strings.HasSuffix(got.Error(), c.want)) {
			t.Errorf("%s on %s: %v (compiled %v), want …%s", c.on, c.b, got, ok, c.want)
		}
	}
}

// Every problem of one fault is said at once, each at its key: within
// on: a misspelt boundary and each malformed filter, beside nth and do.
func TestParseSaysEveryProblem(t *testing.T) {
	_, probs := fault.Parse(fault.Spec{On: "broker.rply(XADD, topik=a, queue)", Nth: 0, Do: "kil"}, dialects())
	var got []string
	for _, p := range probs {
		got = append(got, p.Error())
	}
	want := []string{
		`on: broker has no boundary "rply" (did you mean "reply"?); it has: reply, request`,
		`on: broker.rply(XADD, topik=a, queue): want NAME=VALUE filters, NAME one of topic, group, subject, exchange, routing_key, queue; got "topik=a" (did you mean "topic"?)`,
		`on: broker.rply(XADD, topik=a, queue): want NAME=VALUE filters, NAME one of topic, group, subject, exchange, routing_key, queue; got "queue" (did you mean "queue"?)`,
		"nth: must be at least 1, got 0",
		`do: unknown action "kil" (did you mean "kill"?); one of: cut, delay(DURATION), drop, duplicate, error, kill`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	_, probs = fault.Parse(fault.Spec{On: "consumer_db.commit(table=inbox)", Nth: 1, Do: "duplicate"}, nil)
	if len(probs) != 1 || probs[0].Key != "do" || !strings.Contains(probs[0].Err.Error(), "applies on a broker boundary") {
		t.Errorf("a broker's action on a database: %v", probs)
	}
}

// A trigger meets a crossing as its proxy counts it: a broker trigger on
// the crossing's operation where its boundary does not pass it by, a
// database trigger on its link and boundary whose table it wrote (by name
// or schema.name, in any case).
func TestTriggerMeetsACrossingAsTheProxyCounts(t *testing.T) {
	fetch := fault.Crossing{Link: fault.Broker, Op: "deliver", Request: fault.Strikes, Response: fault.Passed}
	if !fetch.Trigger(fault.Request).Meets(fetch) || fetch.Trigger(fault.Reply).Meets(fetch) {
		t.Error("an idle Fetch: request(deliver) counts it, reply(deliver) passes it by")
	}
	if got := fetch.Label(); got != "broker.request(deliver)" {
		t.Errorf("label %q", got)
	}
	commit := fault.Crossing{Link: fault.ConsumerDB, Boundary: fault.Commit, Tables: []string{"inbox", "projection"}}
	for table, want := range map[string]bool{"INBOX": true, "public.inbox": false, "outbox": false, "": true} {
		if got := commit.DatabaseTrigger(table).Meets(commit); got != want {
			t.Errorf("consumer_db.commit(table=%s) meets a commit of %v: %v, want %v", table, commit.Tables, got, want)
		}
	}
	if f := (fault.Filter{Table: "inbox"}); !f.TableIs("public.inbox") || !f.TableIs("Inbox") || f.TableIs("outbox") {
		t.Error("TableIs: by name or schema.name, in any case")
	}
}

// A service's ready: {on: …} is read by the fault's own parser, with its
// problems: the place alone, its nth and do never read, a trigger that
// only counts (fault.Never at an nth never reached), compiled for every
// broker's proxy as a fault is.
func TestWatchReadsThePlaceAlone(t *testing.T) {
	f, probs := fault.Watch("broker.request(xreadgroup)", dialects())
	if len(probs) != 0 {
		t.Fatalf("problems %v", probs)
	}
	if f.On() != "broker.request(XREADGROUP)" || f.Action.Do != fault.Never.Do || f.Action.Delay != fault.Never.Delay || f.Nth < 1<<62 {
		t.Errorf("watch %s nth=%d do=%v: want broker.request(XREADGROUP), never reached, never striking", f.On(), f.Nth, f.Action)
	}
	if c, ok := f.For("redis"); !ok || c.Skip != nil {
		t.Errorf("for redis: %+v %v", c, ok)
	}
	if c, ok := f.For("kafka"); !ok || c.Skip == nil || !strings.Contains(c.Skip.Error(), `unknown operation "XREADGROUP"`) {
		t.Errorf("for kafka: %+v %v, want its skip in Kafka's words", c, ok)
	}
	for on, want := range map[string]string{
		"consumer_db.comit(table=inbox)": `consumer_db has no boundary "comit" (did you mean "commit"?)`,
		"brokr.reply(publish)":           `unknown link "brokr" (did you mean "broker"?)`,
		"consumer_db.commit":             `want <link>.<boundary>(<filter>)`,
	} {
		_, probs := fault.Watch(on, dialects())
		if len(probs) != 1 || probs[0].Key != "on" || !strings.Contains(probs[0].Err.Error(), want) {
			t.Errorf("%q: problems %v, want one at on: containing %q", on, probs, want)
		}
	}
}
