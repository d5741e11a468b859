package system

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/internal/guardfile"
	"github.com/outboxdrill/runner/internal/lazy"
)

// Load reads and checks the system file at path, under ctx. A file that
// cannot be read (missing, not a regular file, over guardfile.System's
// cap) is err, for the caller to report where the file is named (a
// scenario's system: key, --system). Every problem of the file is in errs,
// at its file:line:col, with the closest known key when one is misspelt.
// kinds are the brokers it may name (cmd/runner: kinds.All()); the System
// keeps them (System.Kinds).
func Load(ctx context.Context, path string, kinds []*broker.Kind) (sys *System, errs diag.Errors, err error) {
	src, err := guardfile.Read(ctx, path, guardfile.System)
	if err != nil {
		return nil, nil, err
	}
	sys, errs = Parse(path, src, kinds)
	return sys, errs, nil
}

// Parse reads a system file's text; file names it in errors and anchors
// relative paths. kinds are the brokers it may name.
func Parse(file string, src []byte, kinds []*broker.Kind) (*System, diag.Errors) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		p := diag.Locate(src, err)
		return nil, diag.Errors{diag.Errorf(diag.Pos{File: file, Line: p.Line, Col: p.Col}, "%s", p.Msg)}
	}
	if len(doc.Content) == 0 {
		return nil, diag.Errors{diag.Errorf(diag.Pos{File: file, Line: 1, Col: 1}, "empty file: a system file needs %s", strings.Join(required, ", "))}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, diag.Errors{diag.Errorf(diag.NodePos(file, root), "a system file is a map with %s, got a %s", strings.Join(required, ", "), diag.KindName(root))}
	}
	s := &System{File: file, Dir: filepath.Dir(file), Services: map[string]*Service{}, Pos: map[string]diag.Pos{}, Kinds: kinds}
	var errs diag.Errors
	seen := map[string]bool{}
	for _, kv := range diag.Pairs(file, root, &errs) {
		read, ok := topKeys[kv.Key]
		if !ok {
			errs = append(errs, diag.Errorf(kv.KeyPos, "unknown key %q%s; a system file has: %s", kv.Key, diag.Suggest(kv.Key, keyNames()), strings.Join(keyNames(), ", ")))
			continue
		}
		seen[kv.Key] = true
		read(s, file, kv, &errs)
	}
	for _, k := range required {
		if !seen[k] {
			errs = append(errs, diag.Errorf(diag.NodePos(file, root), "missing %s: a system file needs %s", k, strings.Join(required, ", ")))
		}
	}
	s.checkStream(file, root, seen["stream"], &errs)
	s.checkVariants(&errs)
	s.checkReady(&errs)
	s.checkPlaceholders(&errs)
	if len(errs) > 0 {
		return nil, errs
	}
	return s, nil
}

// required are the keys every system file has; stream too where the
// services talk to a broker whose entries carry fields (checkStream).
var required = []string{"services", "produce", "outbox", "inbox"}

// checkStream: stream: names the fields of a Redis stream entry, on a
// broker whose Kind has EntryFields. A file whose services may run on one
// needs it; one whose brokers exclude them may leave it out (a Kafka
// record's key is the event id, its value the payload), and there it is
// not read.
func (s *System) checkStream(file string, root *yaml.Node, given bool, errs *diag.Errors) {
	fielded := slices.IndexFunc(s.Brokers, func(b string) bool {
		i := slices.IndexFunc(s.Kinds, func(k *broker.Kind) bool { return k.Name == b })
		return i >= 0 && s.Kinds[i].EntryFields
	})
	switch {
	case given:
	case s.Brokers == nil:
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, root), "missing stream: the fields of a Redis stream entry that carry the event id and the payload (stream: {event_id: …, payload: …}); "+
			"a system whose services do not talk to Redis lists its brokers instead (brokers: [kafka]) and leaves stream: out"))
	case fielded >= 0:
		*errs = append(*errs, diag.Errorf(s.At("brokers"), "missing stream: brokers lists %s, whose entries carry the event id and the payload in fields the file names (stream: {event_id: …, payload: …})", s.Brokers[fielded]))
	}
}

// topKeys read each top-level key into the System.
var topKeys = map[string]func(s *System, file string, kv diag.Pair, errs *diag.Errors){
	"services": readServices,
	"schema": func(s *System, file string, kv diag.Pair, errs *diag.Errors) {
		f := fields(file, kv, []string{"producer", "consumer"}, nil, errs)
		for k, n := range f {
			s.Pos["schema."+k] = diag.NodePos(file, n)
		}
		s.Schema.Producer = s.schemaFile(file, "schema.producer", f["producer"], errs)
		s.Schema.Consumer = s.schemaFile(file, "schema.consumer", f["consumer"], errs)
	},
	"produce": func(s *System, file string, kv diag.Pair, errs *diag.Errors) {
		sql := scalar(file, kv.Key, kv.Value, errs)
		s.ProducePos = diag.NodePos(file, kv.Value)
		s.Pos["produce"] = s.ProducePos
		var err error
		if s.Produce, s.ProduceArgs, err = bindParams(sql); err != nil {
			*errs = append(*errs, diag.Errorf(s.ProducePos, "produce: %v", err))
		}
	},
	"outbox": func(s *System, file string, kv diag.Pair, errs *diag.Errors) {
		f := s.mapping(file, kv, []string{"table", "event_id", "payload", "unpublished"}, errs)
		s.Outbox = Outbox{ident(file, f["table"], errs), ident(file, f["event_id"], errs), ident(file, f["payload"], errs), text(file, f["unpublished"], errs)}
	},
	"stream": func(s *System, file string, kv diag.Pair, errs *diag.Errors) {
		f := s.mapping(file, kv, []string{"event_id", "payload"}, errs)
		s.Stream = Stream{EventID: text(file, f["event_id"], errs), Payload: text(file, f["payload"], errs)}
		if n := f["event_id"]; n != nil {
			s.Stream.EventIDPos = diag.NodePos(file, n)
		}
		if n := f["payload"]; n != nil {
			s.Stream.PayloadPos = diag.NodePos(file, n)
		}
	},
	"inbox": func(s *System, file string, kv diag.Pair, errs *diag.Errors) {
		f := s.mapping(file, kv, []string{"table", "consumer", "event_id", "payload"}, errs, "applied_order")
		s.Inbox = Inbox{Table: ident(file, f["table"], errs), Consumer: ident(file, f["consumer"], errs), EventID: ident(file, f["event_id"], errs), Payload: ident(file, f["payload"], errs)}
		if n := f["applied_order"]; n != nil {
			s.Inbox.AppliedOrder = ident(file, n, errs)
		}
	},
	"projection": func(s *System, file string, kv diag.Pair, errs *diag.Errors) {
		s.Pos["projection"] = diag.NodePos(file, kv.Value)
		// The runner wraps the query (FROM (…) t): a trailing ; would end it.
		s.Projection = strings.TrimRight(strings.TrimSpace(scalar(file, kv.Key, kv.Value, errs)), "; \t\n")
	},
	"brokers": readBrokers,
	"event":   readEvent,
	"dead_letter": func(s *System, file string, kv diag.Pair, errs *diag.Errors) {
		s.Pos["dead_letter"] = diag.NodePos(file, kv.Value)
		s.DeadLetter = strings.TrimSpace(scalar(file, kv.Key, kv.Value, errs))
		for _, m := range placeholder().FindAllStringSubmatch(s.DeadLetter, -1) {
			if !IsPlaceholder(m[1]) {
				*errs = append(*errs, diag.Errorf(s.Pos["dead_letter"], "dead_letter: unknown placeholder ${%s}%s", m[1], diag.Suggest(m[1], Placeholders)))
			}
		}
	},
}

// mapping reads a map whose keys are all required (outbox, stream, inbox)
// but the optional ones and keeps each value's position as "key.field" in
// s.Pos, for the errors of the catalog check.
func (s *System) mapping(file string, kv diag.Pair, keys []string, errs *diag.Errors, optional ...string) map[string]*yaml.Node {
	f := fields(file, kv, append(slices.Clip(keys), optional...), keys, errs)
	s.Pos[kv.Key] = diag.NodePos(file, kv.Value)
	for k, n := range f {
		s.Pos[kv.Key+"."+k] = diag.NodePos(file, n)
	}
	return f
}

func keyNames() []string {
	return []string{"services", "schema", "produce", "outbox", "stream", "inbox", "projection", "brokers", "event", "dead_letter"}
}

// readBrokers reads the brokers the team's services can talk to: a run on
// another one skips the scenario rather than hand a service a URL scheme it
// cannot parse.
func readBrokers(s *System, file string, kv diag.Pair, errs *diag.Errors) {
	names := s.kindNames()
	if kv.Value.Kind != yaml.SequenceNode || len(kv.Value.Content) == 0 {
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, kv.Value), "brokers: want a non-empty list of %s, e.g. [redis], got %s", strings.Join(names, ", "), diag.Describe(kv.Value)))
		return
	}
	s.Pos["brokers"] = diag.NodePos(file, kv.Value)
	for _, n := range kv.Value.Content {
		b := scalar(file, "brokers", n, errs)
		switch {
		case b == "":
		case !slices.Contains(names, b):
			*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "brokers: unknown broker %q%s; brokers: %s", b, diag.Suggest(b, names), strings.Join(names, ", ")))
		case slices.Contains(s.Brokers, b):
			*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "brokers: %s given twice", b))
		default:
			s.Brokers = append(s.Brokers, b)
		}
	}
}

func readServices(s *System, file string, kv diag.Pair, errs *diag.Errors) {
	if kv.Value.Kind != yaml.MappingNode || len(kv.Value.Content) == 0 {
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, kv.Value), "services: want a map name → {run: [...], env: {...}, ready: {log: ...}} with at least one service"))
		return
	}
	for _, svc := range diag.Pairs(file, kv.Value, errs) {
		if !serviceName().MatchString(svc.Key) {
			*errs = append(*errs, diag.Errorf(svc.KeyPos, "service name %q: want letters, digits, _ and -", svc.Key))
			continue
		}
		s.Services[svc.Key] = readService(file, svc, s.Kinds, errs)
	}
	s.expandReplicas(errs)
}

var serviceName = lazy.Regexp(`^[A-Za-z][A-Za-z0-9_-]{0,62}$`)

func readService(file string, kv diag.Pair, kinds []*broker.Kind, errs *diag.Errors) *Service {
	svc := &Service{Name: kv.Key, Pos: kv.KeyPos, Env: map[string]string{}, EnvPos: map[string]diag.Pos{}}
	required := []string{"run"}
	if hasKey(kv.Value, "variants") {
		required = nil // checkVariants: a variant may give it
	}
	readServiceFields(file, kv, svc, required, kinds, errs)
	return svc
}

// readServiceFields reads run, env and ready into svc, and a service's
// variants, one per broker of kinds (a variant has none: required is nil
// there).
func readServiceFields(file string, kv diag.Pair, svc *Service, required []string, kinds []*broker.Kind, errs *diag.Errors) {
	known := []string{"run", "env", "ready", "variants", "replicas"}
	variant := strings.Contains(kv.Key, ": variants: ")
	if variant {
		known = known[:3]
	}
	f := fields(file, kv, known, required, errs)
	if n := f["run"]; n != nil {
		svc.Run = stringList(file, "run", n, errs)
		for _, w := range n.Content {
			svc.RunPos = append(svc.RunPos, diag.NodePos(file, w))
		}
	}
	if n := f["env"]; n != nil {
		svc.Env, svc.EnvPos = stringMap(file, "env", n, errs)
	}
	if n := f["ready"]; n != nil {
		readReady(file, n, svc, broker.Dialects(kinds), errs)
	}
	if n := f["variants"]; n != nil {
		readVariants(file, n, svc, kinds, errs)
	}
	readReplicas(file, f["replicas"], svc, errs)
}

// fields reads a map whose keys are among known, each once, the required
// ones present; values by key.
func fields(file string, kv diag.Pair, known, required []string, errs *diag.Errors) map[string]*yaml.Node {
	out := map[string]*yaml.Node{}
	if kv.Value.Kind != yaml.MappingNode {
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, kv.Value), "%s: want a map with %s, got %s", kv.Key, strings.Join(known, ", "), diag.Describe(kv.Value)))
		return out
	}
	misspelt := map[string]bool{} // a required key an unknown one is the typo of: one problem, said once
	for _, f := range diag.Pairs(file, kv.Value, errs) {
		if !slices.Contains(known, f.Key) {
			hint := diag.Suggest(f.Key, known)
			*errs = append(*errs, diag.Errorf(f.KeyPos, "%s: unknown key %q%s; known: %s", kv.Key, f.Key, hint, strings.Join(known, ", ")))
			for _, k := range known {
				misspelt[k] = misspelt[k] || hint == fmt.Sprintf(" (did you mean %q?)", k)
			}
			continue
		}
		out[f.Key] = f.Value
	}
	for _, r := range required {
		if out[r] == nil && !hasKey(kv.Value, r) && !misspelt[r] {
			*errs = append(*errs, diag.Errorf(diag.NodePos(file, kv.Value), "%s: missing %s", kv.Key, r))
		}
	}
	return out
}

func hasKey(m *yaml.Node, key string) bool {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return true
		}
	}
	return false
}

// scalar is a non-empty string value.
func scalar(file, key string, n *yaml.Node, errs *diag.Errors) string {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" || strings.TrimSpace(n.Value) == "" {
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "%s: want a non-empty string, got %s", key, diag.Describe(n)))
		return ""
	}
	return n.Value
}

func text(file string, n *yaml.Node, errs *diag.Errors) string {
	if n == nil {
		return ""
	}
	return scalar(file, "value", n, errs)
}

// sqlIdent is a table or column name, optionally schema-qualified: the
// runner quotes it, so nothing else may hide in it.
var sqlIdent = lazy.Regexp(`^[A-Za-z_][A-Za-z0-9_$]{0,62}(\.[A-Za-z_][A-Za-z0-9_$]{0,62})?$`)

func ident(file string, n *yaml.Node, errs *diag.Errors) string {
	s := text(file, n, errs)
	if s != "" && !sqlIdent().MatchString(s) {
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "%q is not a table or column name (letters, digits, _ and $; schema.name allowed)", s))
	}
	return s
}

// schemaFile is a schema (SQL) file named relative to the system file: it
// must be a regular file within guardfile.SQL's cap that opens for
// reading (checked without reading it: validate --offline says what run
// would find); a problem is at the key.
func (s *System) schemaFile(file, key string, n *yaml.Node, errs *diag.Errors) string {
	p := text(file, n, errs)
	if p == "" {
		return ""
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(s.Dir, p)
	}
	if err := guardfile.Check(p, guardfile.SQL); err != nil {
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "%s: %v", key, err))
	}
	return p
}

// duration is a positive duration (60s, 2m); 0 when n is absent.
func duration(file, key string, n *yaml.Node, errs *diag.Errors) time.Duration {
	if n == nil {
		return 0
	}
	d, err := time.ParseDuration(strings.TrimSpace(n.Value))
	if n.Kind != yaml.ScalarNode || err != nil || d <= 0 {
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "%s: want a positive duration such as 60s or 2m, got %s", key, diag.Describe(n)))
		return 0
	}
	return d
}

func stringList(file, key string, n *yaml.Node, errs *diag.Errors) []string {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "%s: want a non-empty list of words, e.g. [node, relay.js], got %s", key, diag.Describe(n)))
		return nil
	}
	var out []string
	for _, e := range n.Content {
		out = append(out, scalar(file, key, e, errs))
	}
	return out
}

// stringMap reads a map NAME → scalar, and where each value is.
// envName is a POSIX environment variable name.
var envName = lazy.Regexp(`^[A-Za-z_][A-Za-z0-9_]*$`)

func stringMap(file, key string, n *yaml.Node, errs *diag.Errors) (map[string]string, map[string]diag.Pos) {
	out, pos := map[string]string{}, map[string]diag.Pos{}
	if n.Kind != yaml.MappingNode {
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "%s: want a map NAME → value, got %s", key, diag.Describe(n)))
		return out, pos
	}
	for _, kv := range diag.Pairs(file, n, errs) {
		if !envName().MatchString(kv.Key) {
			// "A=B" would set A to "B=…" and "" nothing at all: execve
			// splits each entry at its first "=", so a name is what POSIX
			// allows and nothing else.
			*errs = append(*errs, diag.Errorf(kv.KeyPos, "%s: %q is not a variable name: use letters, digits and _, not starting with a digit (POSIX)", key, kv.Key))
			continue
		}
		if kv.Value.Kind != yaml.ScalarNode {
			*errs = append(*errs, diag.Errorf(diag.NodePos(file, kv.Value), "%s: %s: want a string, got %s", key, kv.Key, diag.Describe(kv.Value)))
			continue
		}
		out[kv.Key], pos[kv.Key] = kv.Value.Value, diag.NodePos(file, kv.Value)
	}
	return out, pos
}
