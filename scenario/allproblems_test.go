package scenario

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/system"
)

// A fault map with three independent mistakes (on, do, nth) is three
// errors in one load, each at its own line:col; not one per round.
func TestFaultMistakesAllAtOnce(t *testing.T) {
	src := "name: f\nsteps:\n  - start: {service: relay, fault: {on: \"consumer_db.comit(table=inbox)\", do: kil, nth: 0}}\n"
	_, errs := Parse("t.yaml", []byte(src), testKinds)
	errs.Sort()
	want := []string{
		`t.yaml:3:37: on: consumer_db has no boundary "comit" (did you mean "commit"?)`,
		`t.yaml:3:75: do: unknown action "kil" (did you mean "kill"?)`,
		`t.yaml:3:89: nth: must be at least 1, got 0`,
	}
	if len(errs) != len(want) {
		t.Fatalf("%d errors, want %d:\n%v", len(errs), len(want), errs)
	}
	for i, w := range want {
		if !strings.HasPrefix(errs[i].Error(), w) {
			t.Errorf("error %d:\n got %s\nwant %s…", i, errs[i], w)
		}
	}
	// A value that did not decode is not validated again: one error for
	// a do: that is not a string, none about the action it lacks.
	_, errs = Parse("t.yaml", []byte("name: f\nsteps:\n  - start: {service: relay, fault: {on: \"broker.reply(XADD)\", do: [kill]}}\n"), testKinds)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "do:") {
		t.Errorf("a do: that is a list: %v, want one error about do:", errs)
	}
}

// A broker fault no broker's proxy takes is said, once the system file is
// known, in the words of the brokers that file lists: a Kafka-only file's
// typo gets Kafka's suggestion, not Redis's commands.
func TestBrokerFaultInTheSystemsWords(t *testing.T) {
	src := "name: f\nsteps:\n  - start: {service: relay, fault: {on: \"broker.reply(PUBLSH)\", do: kill}}\n"
	scs, errs := Parse("t.yaml", []byte(src), testKinds)
	if len(errs) > 0 {
		t.Fatalf("the operation is judged with the system's brokers, not at parse: %v", errs)
	}
	kafka := &system.System{File: "s.yaml", Brokers: []string{"kafka"}, Services: map[string]*system.Service{"relay": {}}}
	errs = scs[0].UseSystem(kafka)
	want := `t.yaml:3:41: broker.reply(PUBLSH) applies on none of the brokers s.yaml speaks (brokers: kafka): kafka: unknown operation "PUBLSH"`
	if len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), want) || !strings.Contains(errs[0].Error(), `(did you mean "publish"?)`) || strings.Contains(errs[0].Error(), "Redis") {
		t.Errorf("on a Kafka-only system:\n got %v\nwant %s… (did you mean \"publish\"?), no Redis", errs, want)
	}
	scs, _ = Parse("t.yaml", []byte(src), testKinds)
	anyBroker := &system.System{File: "s.yaml", Services: map[string]*system.Service{"relay": {}}}
	if errs = scs[0].UseSystem(anyBroker); len(errs) != 1 || !strings.Contains(errs[0].Error(), "t.yaml:3:41: on: broker.reply(PUBLSH): no Redis command PUBLSH") {
		t.Errorf("on a system of every broker: %v, want the error of no broker's operation", errs)
	}
}

// validate --broker B: each broker fault against each broker asked for,
// naming it; one the system file does not support is not checked (run
// skips it there).
func TestTriggersCheckedOnEachBroker(t *testing.T) {
	src := "name: f\nsteps:\n  - start: {service: relay, fault: {on: \"broker.reply(Produce)\", do: kill}, also: {on: \"broker.request(publish)\", do: kill}}\n"
	scs, errs := Parse("t.yaml", []byte(src), testKinds)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	sc := scs[0]
	if errs := sc.UseSystem(&system.System{File: "s.yaml", Services: map[string]*system.Service{"relay": {}}}); len(errs) > 0 {
		t.Fatal(errs)
	}
	if errs := sc.CheckTriggersOn("kafka"); len(errs) > 0 {
		t.Errorf("Produce on kafka: %v", errs)
	}
	errs = sc.CheckTriggersOn("rabbitmq")
	want := `t.yaml:3:41: broker.reply(Produce) does not apply on rabbitmq (a run there skips the scenario): unknown operation "Produce"`
	if len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), want) || !strings.HasSuffix(errs[0].Error(), "; Produce is an operation of kafka") {
		t.Errorf("Produce on rabbitmq:\n got %v\nwant %s…; Produce is an operation of kafka", errs, want)
	}
	if errs := sc.CheckTriggersOn("redis"); len(errs) != 1 || !strings.Contains(errs[0].Error(), "does not apply on redis") {
		t.Errorf("Produce on redis: %v", errs)
	}
	sc.System.Brokers = []string{"kafka"}
	if errs := sc.CheckTriggersOn("rabbitmq"); len(errs) > 0 {
		t.Errorf("a broker the system does not support is skipped, not checked: %v", errs)
	}
}

// The system file's brokers: narrow the dialects a typo is judged in: the
// Kafka-only example (examples/node/system-kafka.yaml, brokers: [kafka])
// says a misspelt operation in Kafka's words, with Kafka's closest, and
// never Redis's commands; every mistake of on: is said at once, at on:.
func TestKafkaOnlySystemJudgesATypoInKafkasWords(t *testing.T) {
	sys, serrs, err := system.Load(context.Background(), "../examples/node/system-kafka.yaml", testKinds)
	if err != nil || len(serrs) > 0 || !slices.Equal(sys.Brokers, []string{"kafka"}) {
		t.Fatalf("the Kafka example: %v %v, brokers %v", err, serrs, sys.Brokers)
	}
	for on, suggestion := range map[string]string{"PUBLSH": "publish", "Fetchh": "Fetch", "OffsetComit": "OffsetCommit"} {
		src := "name: f\nsteps:\n  - start: {service: relay, fault: {on: \"broker.reply(" + on + ")\", do: kill}}\n"
		scs, errs := Parse("t.yaml", []byte(src), testKinds)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		errs = scs[0].UseSystem(sys)
		want := `t.yaml:3:41: broker.reply(` + on + `) applies on none of the brokers ../examples/node/system-kafka.yaml speaks (brokers: kafka): kafka: unknown operation "` + on + `" (want publish, deliver, ack or a Kafka API such as Produce) (did you mean "` + suggestion + `"?)`
		if len(errs) != 1 || errs[0].Error() != want || strings.Contains(errs[0].Error(), "Redis") {
			t.Errorf("%s on the Kafka-only example:\n got %v\nwant %s", on, errs, want)
		}
	}
	src := "name: f\nsteps:\n  - start: {service: relay, fault: {on: \"broker.rply(publish, topik=orders)\", do: kil}}\n"
	_, errs := Parse("t.yaml", []byte(src), testKinds)
	errs.Sort()
	if len(errs) != 3 || !strings.HasPrefix(errs[0].Error(), `t.yaml:3:37: on: broker has no boundary "rply"`) ||
		!strings.HasPrefix(errs[1].Error(), `t.yaml:3:37: on: broker.rply(publish, topik=orders): want NAME=VALUE filters`) || !strings.HasPrefix(errs[2].Error(), `t.yaml:3:79: do: unknown action "kil"`) {
		t.Errorf("every mistake of one fault, each at its key:\n%v", errs)
	}
}
