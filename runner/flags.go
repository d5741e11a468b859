package runner

import (
	"flag"
	"os"
	"strings"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/world"
)

// ServerFlag is a command's flag for one server's URL: its name, the
// environment variable it defaults to, world.Probe's kind, and the value.
type ServerFlag struct {
	Name, Env, Kind string
	URL             *string
}

// pgEnv is the variable --pg defaults to.
const pgEnv = "RUNNER_PG_URL"

// PGFlag adds --pg, defaulting to RUNNER_PG_URL; clean: the flag names a
// server to clean, else one to use instead of starting one.
func PGFlag(fs *flag.FlagSet, url *string, clean bool) ServerFlag {
	usage := "use the PostgreSQL server at admin `URL` instead of starting one (env " + pgEnv + ")"
	if clean {
		usage = "clean the PostgreSQL server at admin `URL` (env " + pgEnv + ")"
	}
	fs.StringVar(url, "pg", os.Getenv(pgEnv), usage)
	return ServerFlag{Name: "pg", Env: pgEnv, Kind: world.Postgres, URL: url}
}

// BrokerFlag adds kind k's URL flag (--redis, …), defaulting to k.Env;
// clean: the flag names a server to clean, else one to use instead of
// starting the runner's own.
func BrokerFlag(fs *flag.FlagSet, k *broker.Kind, url *string, clean bool) ServerFlag {
	usage := "use " + k.FlagUsage + " instead of starting " + k.Own + " (env " + k.Env + ")"
	if clean {
		usage = "clean " + k.FlagUsage + " (env " + k.Env + ")"
	}
	fs.StringVar(url, k.Flag, os.Getenv(k.Env), usage)
	return ServerFlag{Name: k.Flag, Env: k.Env, Kind: k.Name, URL: url}
}

// BrokerFlags adds the URL flag of every registered broker kind.
func BrokerFlags(fs *flag.FlagSet, clean bool) []ServerFlag {
	var out []ServerFlag
	for _, k := range broker.Kinds() {
		out = append(out, BrokerFlag(fs, k, new(string), clean))
	}
	return out
}

// URLs are the broker URLs flags hold, by broker name (Params.URLs).
func URLs(flags []ServerFlag) map[string]string {
	out := map[string]string{}
	for _, f := range flags {
		if f.Kind != world.Postgres && *f.URL != "" {
			out[f.Kind] = *f.URL
		}
	}
	return out
}

// FlagNames lists flags as help text does: "--pg, --redis, --nats".
func FlagNames(flags []ServerFlag) string {
	var names []string
	for _, f := range flags {
		names = append(names, "--"+f.Name)
	}
	return strings.Join(names, ", ")
}

// ServerArgs are the server flags of clean as a usage line shows them:
// "[--pg URL] [--redis URL] … [--kafka HOST:PORT]".
func ServerArgs() string {
	args := []string{"[--pg URL]"}
	for _, k := range broker.Kinds() {
		arg, _ := flag.UnquoteUsage(&flag.Flag{Usage: k.FlagUsage, Value: new(flagString)})
		args = append(args, "[--"+k.Flag+" "+arg+"]")
	}
	return strings.Join(args, " ")
}

// flagString is a string flag.Value, for flag.UnquoteUsage.
type flagString string

func (s *flagString) String() string     { return string(*s) }
func (s *flagString) Set(v string) error { *s = flagString(v); return nil }

// BrokerList names the brokers in prose: "Redis Streams, NATS JetStream,
// RabbitMQ or Kafka".
func BrokerList() string {
	var names []string
	for _, k := range broker.Kinds() {
		names = append(names, k.Product)
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
