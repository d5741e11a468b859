// Package brokerfixture is a broker kind defined and registered outside
// the runner's list, in this one package, as a new broker would be: its
// test shows it reaching --broker, the URL flags and their variables, the
// probe, clean (server and temp dirs), the scenario reference and schema
// (its own key and options), per-broker overrides, system files and the
// guarantees document, with no edit anywhere else.
//
// Its server is a toy: a loopback listener that answers "FIX?" with
// "FIX!" and keeps no stream, so New refuses; the conformance suite
// (brokertest) is for a real broker.
package brokerfixture

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/outboxdrill/runner/broker"
	// The built-in kinds register first (this package imports them), so
	// they keep their order (and Redis stays the default) with this one
	// after them.
	"github.com/outboxdrill/runner/broker/kinds"
)

// Name is the fixture broker's name.
const Name = "fixture"

// Leftover is the one object the fixture's Clean reports removing.
const Leftover = broker.NamePrefix + ":fixture-leftover"

// Kind is the fixture broker.
var Kind = &broker.Kind{
	Name: Name, Title: "Fixture", Product: "the Fixture broker",
	Flag: "fixture", Env: "RUNNER_FIXTURE_URL",
	FlagUsage: "the fixture server at `ADDR`", Own: "one", Want: "fixture://HOST:PORT",
	Probe: broker.Probe{
		Protocol: "Fixture", Hello: []byte("FIX?"), Need: 4,
		OK:    func(a []byte) bool { return string(a[:4]) == "FIX!" },
		Addrs: addrs,
		Guess: func(a []byte) string {
			if strings.HasPrefix(string(a), "FIX!") {
				return "a fixture server"
			}
			return ""
		},
	},
	Capabilities: capabilities,

	Start: start,
	Open:  open,
	Dir:   "fixture",
	Limits: map[broker.Capability]string{
		broker.ClaimByIdle: "the fixture keeps no pending entries to claim (https://example.com/fixture#claim)",
	},
	Verbs: broker.Verbs{Publish: "PUT", Read: "TAKE", Ack: "DONE", Claim: "RETAKE"},
	Mechanisms: map[broker.Mechanism]string{
		broker.SecondPublish: "fixture: a second publish",
		broker.Takeover:      "fixture: a takeover",
		broker.RolledBack:    "fixture: a rollback",
		broker.Inspection:    "fixture: an inspection",
		broker.DeadLetters:   "fixture: dead letters",
		broker.Durability:    "fixture: durability",
	},
	Options:    Options{},
	OptionsDoc: "this scenario's fixture stream",
}

// capabilities are every capability but the one its Limits say it lacks.
func capabilities(broker.Scenario) broker.Capabilities {
	cs := broker.Capabilities{}
	for _, c := range broker.AllCapabilities {
		cs[c] = c != broker.ClaimByIdle
	}
	return cs
}

// Options tune a scenario's fixture stream (its fixture: key).
type Options struct {
	Depth int  `param:"depth" default:"2" min:"1" doc:"how deep the fixture stream is"`
	Loud  bool `param:"loud" doc:"the fixture shouts"`
}

func init() { broker.Register(Kind) }

// Kinds are the brokers a test with the fixture loads against: the
// built-in ones, then the fixture, as registered.
func Kinds() []*broker.Kind { return append(kinds.All(), Kind) }

// addrs reads fixture://HOST:PORT.
func addrs(url string) ([]broker.Addr, bool, error) {
	hostPort, ok := strings.CutPrefix(url, "fixture://")
	if _, _, err := net.SplitHostPort(hostPort); !ok || err != nil {
		return nil, false, errors.New("want fixture://HOST:PORT")
	}
	return []broker.Addr{{Network: "tcp", Addr: hostPort}}, true, nil
}

// start serves the toy protocol on a loopback port until the run ends.
func start(_ context.Context, h broker.Host) (string, broker.Process, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	h.Defer(func(context.Context) error { return ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go Serve(c)
		}
	}()
	h.Logf("started the fixture server at %s", ln.Addr())
	return "fixture://" + ln.Addr().String(), nil, nil
}

// Serve answers one connection: "FIX!" to "FIX?".
func Serve(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err == nil && string(buf) == "FIX?" {
		_, _ = c.Write([]byte("FIX!"))
	}
}

// conn is a connection to the fixture server: nothing but a name.
type conn struct{}

func open(context.Context, broker.Host, string, broker.Process) (broker.Conn, error) {
	return conn{}, nil
}

func (conn) New(context.Context, string, broker.Scenario) (broker.Broker, error) {
	return nil, errors.New("the fixture broker keeps no stream")
}
func (conn) Server() (broker.Process, string) { return nil, "" }
func (conn) Ready(context.Context) error      { return nil }
func (conn) Hints(key string) []string        { return []string{"fixture: " + key} }

func (conn) Lease(context.Context, string) (func(context.Context) error, error) {
	return func(context.Context) error { return nil }, nil
}

func (conn) Clean(context.Context) (broker.Cleaned, error) {
	return broker.Cleaned{Dropped: []string{Leftover}}, nil
}
