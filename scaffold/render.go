package scaffold

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/outboxdrill/runner/internal/lazy"
)

// Plan is the system file init writes: each key with its evidence.
type Plan struct {
	Broker   string
	Header   []string // the file's opening comment
	Services []*ServicePlan
	Keys     []*Key // schema, produce, outbox, stream, inbox, projection, event, brokers: in file order
	// What the starter scenarios need: the inbox table (the consumer's
	// commit faults name it), the consumer id, whether there is a
	// projection to expect.
	InboxTable string
	Projection bool
}

// ServicePlan is one service as the file writes it.
type ServicePlan struct {
	Name     string
	Cmd      Command
	Ready    string // ready: {log: …}; "" for none
	Comments []string
}

// Key is one top-level key: its YAML value, the comments above it (the
// evidence first) and the commented alternatives below it.
type Key struct {
	Name         string
	Value        string
	Comments     []string
	Alternatives []string
}

// key is the plan's key named name, nil without one.
func (p *Plan) key(name string) *Key {
	for _, k := range p.Keys {
		if k.Name == name {
			return k
		}
	}
	return nil
}

// set puts k in the plan, replacing a key of its name.
func (p *Plan) set(k *Key) {
	for i, old := range p.Keys {
		if old.Name == k.Name {
			p.Keys[i] = k
			return
		}
	}
	p.Keys = append(p.Keys, k)
}

// Render is the system file's text.
func (p *Plan) Render() []byte {
	var b bytes.Buffer
	for _, h := range p.Header {
		comment(&b, "", h)
	}
	b.WriteString("services:\n")
	for _, s := range p.Services {
		for _, c := range s.Comments {
			comment(&b, "  ", c)
		}
		fmt.Fprintf(&b, "  %s: %s\n", s.Name, s.value())
	}
	for _, k := range p.Keys {
		for _, c := range k.Comments {
			comment(&b, "", c)
		}
		fmt.Fprintf(&b, "%s: %s\n", k.Name, k.Value)
		for _, a := range k.Alternatives {
			comment(&b, "", "or: "+k.Name+": "+a)
		}
	}
	return b.Bytes()
}

// value is the service's flow map: run, env, ready.
func (s *ServicePlan) value() string {
	run := make([]string, len(s.Cmd.Argv))
	for i, w := range s.Cmd.Argv {
		run[i] = yq(w)
	}
	parts := []string{"run: [" + strings.Join(run, ", ") + "]"}
	if len(s.Cmd.Env) > 0 {
		var env []string
		for _, k := range slices.Sorted(maps.Keys(s.Cmd.Env)) {
			env = append(env, k+": "+yq(s.Cmd.Env[k]))
		}
		parts = append(parts, "env: {"+strings.Join(env, ", ")+"}")
	}
	if s.Ready != "" {
		parts = append(parts, "ready: {log: "+yq(s.Ready)+"}")
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// comment writes text as comment lines (one per line of it), control
// characters shown escaped: a comment never ends early.
func comment(b *bytes.Buffer, indent, text string) {
	for _, line := range strings.Split(text, "\n") {
		fmt.Fprintf(b, "%s# %s\n", indent, printable(line))
	}
}

func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}

// flow is a YAML flow map of key, value pairs, the values quoted as
// needed.
func flow(kv ...string) string {
	var parts []string
	for i := 0; i+1 < len(kv); i += 2 {
		parts = append(parts, kv[i]+": "+yq(kv[i+1]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

var plainYAML = lazy.Regexp(`^(-[A-Za-z]|[A-Za-z_./])[A-Za-z0-9_./-]*$`)

// yamlWords are plain scalars YAML reads as something other than a string.
var yamlWords = []string{"true", "false", "yes", "no", "on", "off", "null", "y", "n"}

// yq is s as a YAML scalar: plain when that reads back as the same
// string, else double-quoted (JSON's quoting is YAML's).
func yq(s string) string {
	if plainYAML().MatchString(s) && !slices.Contains(yamlWords, strings.ToLower(s)) {
		return s
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}
