package kinds_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/broker"
	_ "github.com/outboxdrill/runner/broker/kinds"
	"github.com/outboxdrill/runner/broker/redisstream"
	"github.com/outboxdrill/runner/servers"
	"github.com/outboxdrill/runner/steps"
)

// The list: the built-in brokers in the order reports show them, Redis
// (the default) first.
func TestTheList(t *testing.T) {
	want := []string{broker.Redis, broker.NATS, broker.RabbitMQ, broker.Kafka}
	if got := broker.Names(); !slices.Equal(got, want) {
		t.Errorf("names %v, want %v", got, want)
	}
}

// Every registered kind has every field; its options decode; clean looks
// for its server's dir.
func TestEveryKindIsComplete(t *testing.T) {
	for _, k := range broker.Kinds() {
		if err := k.Check(); err != nil {
			t.Errorf("%v", err)
		}
		if k.Options != nil {
			_ = steps.DefaultOptions(k.Options) // panics on a bad default tag
		}
		if !slices.Contains(servers.DirKinds(), k.Dir) {
			t.Errorf("%s: clean does not look for drill-%s-* dirs: %v", k.Name, k.Dir, servers.DirKinds())
		}
	}
}

// Check names each required field a kind leaves zero, and a limit without
// a URL, and a mechanism without words.
func TestCheckNamesWhatAKindLacks(t *testing.T) {
	v := reflect.ValueOf(*redisstream.Kind)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		k := *redisstream.Kind
		reflect.ValueOf(&k).Elem().Field(i).SetZero()
		err := k.Check()
		switch f.Name {
		case "Local", "LabelNote", "Options", "OptionsDoc", "Proxy", "ConsumerID", "DirOwner", "Ports", "Placeholders", "EntryFields", "Pipelined":
			if err != nil {
				t.Errorf("without %s (optional): %v", f.Name, err)
			}
		case "Probe":
			if err == nil || !strings.Contains(err.Error(), "the probe needs") {
				t.Errorf("without a probe: %v", err)
			}
		default:
			if err == nil || !strings.Contains(err.Error(), "no "+f.Name) {
				t.Errorf("without %s: %v", f.Name, err)
			}
		}
	}
	k := *redisstream.Kind
	k.Limits = map[broker.Capability]string{broker.BrokerDedupe: "no reason given"}
	k.Mechanisms = map[broker.Mechanism]string{broker.SecondPublish: "x"}
	k.Options, k.OptionsDoc = struct{ N int }{}, "n"
	err := k.Check()
	for _, want := range []string{"cites no documentation", `no words for the mechanism "dead letters"`, "option N lacks its param or doc tag"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check: %v, want %q", err, want)
		}
	}
}
