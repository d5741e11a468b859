package scaffold

import (
	"context"
	"fmt"
	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/lazy"
	"github.com/outboxdrill/runner/world"
	"maps"
	"net/url"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/internal/guardfile"
	"github.com/outboxdrill/runner/internal/redact"
	"github.com/outboxdrill/runner/system"
)

// composeService is what init reads of a docker-compose service.
type composeService struct {
	Command     any `yaml:"command"`
	Entrypoint  any `yaml:"entrypoint"`
	Environment any `yaml:"environment"`
	Build       any `yaml:"build"`
}

// FromCompose reads the service name of a docker-compose file as a
// Command that runs on this machine: its entrypoint and command, run
// from its build context (else the file's directory); its environment
// with each server URL made the placeholder of the proxy the runner puts
// before that server, and the names it knows the scenario's (STREAM,
// TOPIC, GROUP …). role (relay or consumer) says which database its
// PostgreSQL URL is. Each rewrite is in the Command's Comments.
func FromCompose(ctx context.Context, file, name, role, brokerName string) (Command, error) {
	src, err := guardfile.Read(ctx, file, guardfile.System)
	if err != nil {
		return Command{}, err
	}
	var doc struct {
		Services map[string]composeService `yaml:"services"`
	}
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return Command{}, fmt.Errorf("%s: %v", file, err)
	}
	svc, ok := doc.Services[name]
	if !ok {
		return Command{}, fmt.Errorf("%s: no service %q; services: %s", file, name, strings.Join(slices.Sorted(maps.Keys(doc.Services)), ", "))
	}
	c := Command{Env: map[string]string{}, Dir: filepath.Dir(file)}
	for _, part := range []any{svc.Entrypoint, svc.Command} {
		words, err := composeWords(part)
		if err != nil {
			return Command{}, fmt.Errorf("%s: service %s: %v", file, name, err)
		}
		c.Argv = append(c.Argv, words...)
	}
	if len(c.Argv) == 0 {
		return Command{}, fmt.Errorf("%s: service %s has no command: (its image's own is not known here): give its command line with --%s", file, name, role)
	}
	switch ctxDir := buildContext(svc.Build); {
	case filepath.IsAbs(ctxDir):
		c.Dir = ctxDir
	case ctxDir != "":
		c.Dir = filepath.Join(c.Dir, ctxDir)
	}
	env, err := composeEnv(svc.Environment)
	if err != nil {
		return Command{}, fmt.Errorf("%s: service %s: %v", file, name, err)
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		v, why := placeholderFor(k, env[k], role, brokerName)
		if strings.Contains(v, "${") && why == "" {
			return Command{}, fmt.Errorf("%s: service %s: environment %s: %s is compose's interpolation, which init does not resolve: give its command line with --%s", file, name, k, env[k], role)
		}
		c.Env[k] = v
		if why != "" {
			c.Comments = append(c.Comments, fmt.Sprintf("env %s: %s in %s → %s (%s)", k, redact.URL(env[k]), filepath.Base(file), v, why))
		}
	}
	return c, nil
}

// composeWords reads a command or entrypoint: a list, or a string split
// as sh would.
func composeWords(v any) ([]string, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case string:
		return splitWords(v)
	case []any:
		out := make([]string, len(v))
		for i, w := range v {
			out[i] = fmt.Sprint(w)
		}
		return out, nil
	}
	return nil, fmt.Errorf("a command is a string or a list, got %T", v)
}

// composeEnv reads environment: a map, or a list of NAME=VALUE.
func composeEnv(v any) (map[string]string, error) {
	out := map[string]string{}
	switch v := v.(type) {
	case nil:
	case map[string]any:
		for k, x := range v {
			if x != nil {
				out[k] = fmt.Sprint(x)
			}
		}
	case []any:
		for _, x := range v {
			if k, val, ok := strings.Cut(fmt.Sprint(x), "="); ok {
				out[k] = val
			}
		}
	default:
		return nil, fmt.Errorf("environment is a map or a list, got %T", v)
	}
	return out, nil
}

func buildContext(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case map[string]any:
		if c, ok := v["context"].(string); ok {
			return c
		}
	}
	return ""
}

// envNames are the variable names teams give the scenario's objects, each
// with the placeholders it may stand for: the first that means something
// on the run's broker is taken (STREAM is the stream key on one broker,
// the stream's name on another).
var envNames = map[string][]string{
	"STREAM": {"stream", "stream_name"}, "STREAM_KEY": {"stream"}, "STREAM_NAME": {"stream_name"},
	"TOPIC": {"topic"}, "KAFKA_TOPIC": {"topic"}, "SUBJECT": {"subject"}, "EXCHANGE": {"exchange"}, "QUEUE": {"queue"},
	"DESTINATION": {"destination"},
	"GROUP":       {"group"}, "GROUP_ID": {"group"}, "CONSUMER_GROUP": {"group"}, "DURABLE": {"group"},
	"CONSUMER": {"consumer"}, "CONSUMER_ID": {"consumer"},
	"BROKERS": {"broker.address"}, "BOOTSTRAP_SERVERS": {"broker.address"}, "KAFKA_BROKERS": {"broker.address"}, "KAFKA_BOOTSTRAP_SERVERS": {"broker.address"},
}

var hostPorts = lazy.Regexp(`^[A-Za-z0-9._-]+:[0-9]+(,[A-Za-z0-9._-]+:[0-9]+)*$`)

// placeholderFor is value of env key as the runner's placeholder, with
// why; value itself and "" where init knows none. A server's URL is told
// by the runner's own check of the flag that names such a server.
func placeholderFor(key, value, role, brokerName string) (string, string) {
	if strings.Contains(value, "://") || strings.Contains(value, "=") {
		if world.CheckURL(world.Postgres, value) == nil {
			db := map[string]string{"relay": "producer_db", "consumer": "consumer_db"}[role]
			return "${" + db + ".url}", "the " + role + "'s database, through its proxy"
		}
	}
	u, err := url.Parse(value)
	switch {
	case err == nil && u.Host != "" && u.Scheme != "http" && u.Scheme != "https" && world.CheckURL(brokerName, value) == nil:
		return "${broker.url}", "the broker, through its proxy"
	case hostPorts().MatchString(value) && world.CheckURL(brokerName, value) == nil && !slices.Contains(envNames[strings.ToUpper(key)], "group"):
		return "${broker.address}", "the broker, through its proxy"
	}
	for _, name := range envNames[strings.ToUpper(key)] {
		if system.Means(broker.Kinds(), name, brokerName) {
			return "${" + name + "}", "the scenario's, by the variable's name"
		}
	}
	return value, ""
}
