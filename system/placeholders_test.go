package system

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/broker"
)

const kafkaOnly = `services:
  consumer: {run: [node, c.js, "${topic}"], env: {BROKERS: "${broker.address}", GROUP: "${group}", DB: "${consumer_db.url}"}}
produce: "SELECT ${event}"
outbox: {table: o, event_id: e, payload: p, unpublished: "true"}
inbox: {table: i, consumer: c, event_id: e, payload: p}
brokers: [kafka]
`

// A file for Kafka alone needs no stream: and may use Kafka's names; a
// placeholder that names nothing on a broker the file lists and a missing
// stream: where Redis may run are errors at their line:col, naming the
// broker.
func TestPlaceholdersAndStreamByBroker(t *testing.T) {
	s, errs := Parse("f.yaml", []byte(kafkaOnly), testKinds)
	if len(errs) > 0 {
		t.Fatalf("a Kafka-only file: %v", errs)
	}
	refs := s.Services["consumer"].Refs()
	var got []string
	for _, r := range refs {
		got = append(got, r.Where+"="+r.Name+"@"+r.Pos.String())
	}
	if want := "run[2]=topic@f.yaml:2:32 env BROKERS=broker.address@f.yaml:2:60 env GROUP=group@f.yaml:2:88 env DB=consumer_db.url@f.yaml:2:104"; strings.Join(got, " ") != want {
		t.Errorf("refs\n got %s\nwant %s", strings.Join(got, " "), want)
	}
	for _, c := range []struct{ name, src, want string }{
		{"topic on redis", strings.Replace(kafkaOnly, "[kafka]", "[kafka, redis]", 1) + "stream: {event_id: e, payload: p}\n",
			"f.yaml:2:32: services: consumer: run[2]: ${topic} means nothing on redis, only on kafka; a service on redis is told ${stream} and ${group}, and on every broker ${destination}"},
		{"group on rabbitmq", strings.Replace(kafkaOnly, "[kafka]", "[rabbitmq]", 1), "f.yaml:2:88: services: consumer: env GROUP: ${group} means nothing on rabbitmq, only on redis, kafka and nats; a service on rabbitmq is told ${exchange} and ${queue}"},
		{"no stream, no brokers", strings.Replace(kafkaOnly, "brokers: [kafka]\n", "", 1), "f.yaml:1:1: missing stream: the fields of a Redis stream entry"},
		{"no stream, redis listed", strings.Replace(kafkaOnly, "[kafka]", "[redis, kafka]", 1), "f.yaml:6:10: missing stream: brokers lists redis"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, errs := Parse("f.yaml", []byte(c.src), testKinds)
			if !strings.Contains(errs.Error(), c.want) {
				t.Errorf("errors:\n%v\nwant one containing %q", errs, c.want)
			}
		})
	}
}

// Every placeholder means something on at least one broker, and every
// broker is told where it publishes and its address: a service can always
// be written against ${destination} and ${broker.address}.
func TestEveryBrokerHasItsNames(t *testing.T) {
	for _, b := range broker.Names() {
		on := PlaceholdersOn(testKinds, b)
		for _, must := range []string{"destination", "broker.address", "broker.url", "consumer"} {
			if !strings.Contains(" "+strings.Join(on, " ")+" ", " "+must+" ") {
				t.Errorf("%s lacks ${%s}: %v", b, must, on)
			}
		}
	}
	for _, p := range PlaceholderList {
		if on := BrokersOf(testKinds, p.Name); p.Form == "" || !knownBrokers(on) {
			t.Errorf("${%s}: no form, or an unknown broker in %v", p.Name, on)
		}
	}
	for _, k := range testKinds { // a kind's own placeholder is one the docs show
		for _, name := range k.Placeholders {
			if !IsPlaceholder(name) {
				t.Errorf("%s lists ${%s}, which PlaceholderList lacks", k.Name, name)
			}
		}
	}
}

func knownBrokers(bs []string) bool {
	for _, b := range bs {
		if !strings.Contains(" "+strings.Join(broker.Names(), " ")+" ", " "+b+" ") {
			return false
		}
	}
	return true
}

// The docs show every placeholder, in the table a team reads.
func TestPlaceholdersDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/drill-your-own-service.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range PlaceholderList {
		if !bytes.Contains(doc, []byte("| `${"+p.Name+"}` |")) {
			t.Errorf("docs/drill-your-own-service.md has no table row for ${%s}", p.Name)
		}
	}
}

// The schema says the same about stream: as the loader.
func TestSchemaStreamByBroker(t *testing.T) {
	s := compiledSchema(t)
	stream := "stream: {event_id: e, payload: p}\n"
	for src, ok := range map[string]bool{
		kafkaOnly:          true,
		kafkaOnly + stream: true,
		strings.Replace(kafkaOnly, "brokers: [kafka]\n", "", 1):          false,
		strings.Replace(kafkaOnly, "brokers: [kafka]\n", "", 1) + stream: true,
		strings.Replace(kafkaOnly, "[kafka]", "[redis]", 1):              false,
		strings.Replace(kafkaOnly, "[kafka]", "[redis]", 1) + stream:     true,
	} {
		if err := validate(s, src); (err == nil) != ok {
			t.Errorf("valid=%t, want %t:\n%s\n%v", err == nil, ok, src, err)
		}
	}
}
