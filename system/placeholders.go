package system

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/diag"
)

// A placeholder is a ${…} the runner fills in a service's env and run: the
// proxies' addresses and the scenario's names on the broker in use. Some
// name something on one broker only (a Kafka topic, a RabbitMQ queue): a
// service started on another broker could not be told them, so a file
// that uses one there is an error before anything runs, never an empty
// string the service then trips over.

// Placeholder is one ${…} a service may use besides the step's env and the
// scenario's vars.
type Placeholder struct {
	Name string
	// Form is exactly what a service gets, for the docs and the errors.
	Form string
}

// PlaceholderList is every placeholder, in the order the docs show them.
// One that a broker's Kind lists (broker.Kind.Placeholders) names
// something on the brokers that list it only; any other, on every broker.
var PlaceholderList = []Placeholder{
	{"producer_db.url", "postgres://USER@HOST:PORT/DB?sslmode=disable: the producer's database through the service's own PostgreSQL proxy"},
	{"consumer_db.url", "the same for the consumer's database"},
	{"broker.url", "the broker's URL: redis://HOST:PORT (the service's own Redis proxy), nats://HOST:PORT, amqp://USER:PASSWORD@HOST:PORT/VHOST, kafka://HOST:PORT[,HOST:PORT]"},
	{"broker.address", "HOST:PORT[,HOST:PORT]: the broker's address(es), no scheme, no credentials (on redis the proxy's); what kafkajs's brokers (split at the commas), franz-go's SeedBrokers and librdkafka's bootstrap.servers take"},
	{"destination", "where the relay publishes: the stream key on redis, the topic on kafka, the subject on nats, the exchange on rabbitmq"},
	{"stream", "the scenario's stream key, drill:RUNID:N"},
	{"topic", "the scenario's topic, drill_RUNID_N (the stream key with every character outside [A-Za-z0-9._-] made _); the record key is the event id, the value the payload"},
	{"subject", "the subject of the scenario's JetStream stream, drill_RUNID_N.events; header event-id carries the event id, the data the payload"},
	{"stream_name", "the scenario's JetStream stream, drill_RUNID_N"},
	{"exchange", "the scenario's fanout exchange, drill:RUNID:N; the message_id property carries the event id, the body the payload"},
	{"queue", "the consumer id's quorum queue, bound to the exchange: drill:RUNID:N.CONSUMER"},
	{"group", "the consumer group of ${consumer} that the runner reads: on redis the consumer id; on kafka TOPIC.CONSUMER (drill_RUNID_N.accounting); on nats the durable consumer's name, the consumer id"},
	{"consumer", "the consumer id: the scenario's consumer variable, default accounting; what the inbox's consumer column holds"},
	{"runner", "this runner's own executable"},
	{"replica", "the replica's number, 1…N, of a service with replicas: N (NAME-1 gets 1); 1 for a service without replicas"},
}

// Placeholders are the names of every placeholder, sorted.
var Placeholders = placeholderNames()

func placeholderNames() []string {
	out := make([]string, len(PlaceholderList))
	for i, p := range PlaceholderList {
		out[i] = p.Name
	}
	slices.Sort(out)
	return out
}

func lookup(name string) (Placeholder, bool) {
	i := slices.IndexFunc(PlaceholderList, func(p Placeholder) bool { return p.Name == name })
	if i < 0 {
		return Placeholder{}, false
	}
	return PlaceholderList[i], true
}

// IsPlaceholder reports whether name is a placeholder on some broker.
func IsPlaceholder(name string) bool { _, ok := lookup(name); return ok }

// BrokersOf are the brokers among kinds that placeholder name names
// something on, when it is a broker's own (nil: every broker, or none of
// kinds lists it). They come in the order the list first names one of
// each broker's own placeholders (stream: redis, topic: kafka, subject:
// nats, exchange: rabbitmq), the order the docs and the messages use.
func BrokersOf(kinds []*broker.Kind, name string) []string {
	first := func(k *broker.Kind) int {
		return slices.IndexFunc(PlaceholderList, func(p Placeholder) bool { return slices.Contains(k.Placeholders, p.Name) })
	}
	var own []*broker.Kind
	for _, k := range kinds {
		if slices.Contains(k.Placeholders, name) {
			own = append(own, k)
		}
	}
	slices.SortStableFunc(own, func(a, b *broker.Kind) int { return first(a) - first(b) })
	var out []string
	for _, k := range own {
		out = append(out, k.Name)
	}
	return out
}

// Means reports whether placeholder name names something on broker b, one
// of kinds.
func Means(kinds []*broker.Kind, name, b string) bool {
	on := BrokersOf(kinds, name)
	return IsPlaceholder(name) && (on == nil || slices.Contains(on, b))
}

// PlaceholdersOn are the placeholders that mean something on broker b, one
// of kinds, sorted.
func PlaceholdersOn(kinds []*broker.Kind, b string) []string {
	var out []string
	for _, p := range PlaceholderList {
		if Means(kinds, p.Name, b) {
			out = append(out, p.Name)
		}
	}
	slices.Sort(out)
	return out
}

// Meaningless is the error text of placeholder name used on broker b, one
// of kinds, where it names nothing: what it is, and what b's services are
// told instead.
func Meaningless(kinds []*broker.Kind, name, b string) string {
	var own []string
	for _, q := range PlaceholderList {
		if on := BrokersOf(kinds, q.Name); on != nil && slices.Contains(on, b) {
			own = append(own, "${"+q.Name+"}")
		}
	}
	return fmt.Sprintf("${%s} means nothing on %s, only on %s; a service on %s is told %s, and on every broker ${destination} (where the relay publishes) and ${broker.address}",
		name, b, and(BrokersOf(kinds, name)), b, and(own))
}

// and joins words as a sentence does: "a, b and c".
func and(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
}

// Ref is one ${name} in a service's env or run.
type Ref struct {
	Name    string
	Service string
	Where   string // "env TOPIC" or "run[2]"
	Pos     diag.Pos
}

// Refs are the ${…} of the service's env and run, in file order.
func (svc *Service) Refs() []Ref {
	var out []Ref
	name := svc.Name
	if svc.Group != "" {
		name = svc.Group // a replica's words are its service's, as the file writes them
	}
	add := func(where, value string, pos diag.Pos) {
		for _, m := range placeholder().FindAllStringSubmatch(value, -1) {
			out = append(out, Ref{Name: m[1], Service: name, Where: where, Pos: pos})
		}
	}
	for i, a := range svc.Run {
		add(fmt.Sprintf("run[%d]", i), a, svc.at(svc.RunPos, i))
	}
	for _, k := range slices.Sorted(maps.Keys(svc.Env)) {
		add("env "+k, svc.Env[k], svc.EnvPos[k])
	}
	slices.SortStableFunc(out, func(a, b Ref) int {
		if a.Pos.Line != b.Pos.Line {
			return a.Pos.Line - b.Pos.Line
		}
		return a.Pos.Col - b.Pos.Col
	})
	return out
}

func (svc *Service) at(ps []diag.Pos, i int) diag.Pos {
	if i < len(ps) {
		return ps[i]
	}
	return svc.Pos
}

// checkPlaceholders: a file that lists its brokers may use a placeholder
// only where it means something on every one of them.
func (s *System) checkPlaceholders(errs *diag.Errors) {
	if s.Brokers == nil {
		return // the run's broker decides (see scenario's CheckPlaceholders)
	}
	said := map[diag.Pos]bool{}
	for _, name := range s.Names() {
		for _, b := range s.Brokers {
			for _, r := range s.On(b).Services[name].Refs() {
				if IsPlaceholder(r.Name) && !Means(s.Kinds, r.Name, b) && !said[r.Pos] {
					said[r.Pos] = true
					*errs = append(*errs, diag.Errorf(r.Pos, "services: %s: %s: %s (the file's brokers: %s)", r.Service, r.Where, Meaningless(s.Kinds, r.Name, b), strings.Join(s.Brokers, ", ")))
				}
			}
		}
	}
}
