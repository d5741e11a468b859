// Package scenario is the scenario language: it loads scenario files (every
// problem at file:line:col), expands their variables and matrix, and
// describes the language as a reference and a JSON Schema, all from the
// step, check and top-level key registries.
package scenario

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/internal/guardfile"

	"github.com/outboxdrill/runner/steps"
	"github.com/outboxdrill/runner/system"
)

// Scenario is one scenario file, fully decoded and validated.
type Scenario struct {
	File        string
	Name        string
	Pos         diag.Pos // of the name
	Description string
	Tags        []string
	Variant     string // "[amount=5 currency=EUR]" for a matrix variant, else ""
	Steps       []*steps.Call
	// ExpectViolations are the history invariants the scenario declares it
	// breaks (an anti-pattern shows its damage); each must occur. Key
	// "default" holds the list for every broker not named.
	ExpectViolations map[string][]string
	ViolationsPos    diag.Pos
	// Exclusive: a step kills, stops or starts a PostgreSQL, so the scenario
	// runs with no other on that server: on the runner's own servers it and
	// the others like it (DBFaults) get servers of their own and run one at
	// a time beside the rest; on a server given by --pg, alone.
	Exclusive bool
	// BrokerExclusive: a step kills, stops or starts the broker's server, so
	// no other scenario on the same broker runs alongside it (those on the
	// run's other brokers do: each broker has a server of its own).
	BrokerExclusive bool
	// BrokerOptions tune the scenario's stream on each broker with options
	// (broker.Kind.Options), by broker name: a pointer to the kind's
	// options struct, decoded from its key (nats:, kafka:) or its defaults.
	BrokerOptions map[string]any
	brokerKeys    map[string]bool // the brokers whose key the file wrote
	// BrokerDLQ, when > 0, has the broker itself set aside an entry on its
	// BrokerDLQ-th delivery (the broker_dlq: key).
	BrokerDLQ int
	// DBFaults: a step kills or stops a PostgreSQL server, so the producer's
	// and the consumer's databases must live on two servers.
	DBFaults bool
	// System is the team's system file the scenario drills (system: key or
	// --system), nil for the reference pipeline alone.
	System    *system.System
	SystemPos diag.Pos
	// SystemOverridden is the file the scenario's system: key named when
	// --system replaced it ("" otherwise).
	SystemOverridden string
	// systemFailed: the system: key named a file that did not load (its
	// errors said so); checks that need the system are left out then.
	systemFailed bool
	// Settle bounds how long a team's system may take to settle after the
	// last step before it is judged (settle: key); 0: the run's --settle.
	Settle time.Duration
	// Vars are the variant's variables (vars: and matrix:), for the ${…}
	// of a system file's services.
	Vars map[string]string
	// Pinned is the broker the scenario is pinned to (broker: key): a run
	// without --broker runs it there, one on another broker skips it
	// (pin.go). "" for none.
	Pinned    string
	PinnedPos diag.Pos
	// NotJudged are the history invariants the scenario says not to judge
	// (not_judged: key): reported not judged by its own word.
	NotJudged    []string
	NotJudgedPos diag.Pos
}

// ExpandPaths turns files and directories into the sorted list of scenario
// files (directories are searched recursively for *.yaml and *.yml). Only
// regular files are loaded: a FIFO, device or socket named explicitly is an
// error at once (reading a FIFO would block forever); one met in a directory
// walk is skipped. A file over the size cap is LoadFiles' to refuse, from its
// size (guardfile).
func ExpandPaths(paths []string) ([]string, error) {
	var files []string
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !info.IsDir() {
			if !info.Mode().IsRegular() {
				return nil, fmt.Errorf("%s is not a regular file (%s)", p, guardfile.FileKind(info.Mode()))
			}
			files = append(files, filepath.Clean(p))
			continue
		}
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
				return err
			}
			if !d.Type().IsRegular() {
				// A symlink counts if it leads to a regular file.
				if info, err := os.Stat(path); err != nil || !info.Mode().IsRegular() {
					return nil
				}
			}
			files = append(files, path)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Strings(files)
	// A file named twice (itself and inside a named dir, or under two
	// spellings: relative and absolute, through a symlink) runs once, under
	// the first spelling in sorted order.
	seen := map[string]bool{}
	return slices.DeleteFunc(files, func(f string) bool {
		key := canonical(f)
		dup := seen[key]
		seen[key] = true
		return dup
	}), nil
}

// canonical is the absolute path of f with symlinks resolved; f itself
// when that cannot be told.
func canonical(f string) string {
	if real, err := filepath.EvalSymlinks(f); err == nil {
		f = real
	}
	if abs, err := filepath.Abs(f); err == nil {
		return abs
	}
	return f
}

// LoadFiles parses every file and reports every problem in every file, plus
// scenario names used twice. kinds are the brokers the files may name (per
// broker overrides, options keys, broker:, a system file's brokers:):
// cmd/runner passes kinds.All().
func LoadFiles(files []string, kinds []*broker.Kind) ([]*Scenario, diag.Errors) {
	return LoadFilesContext(context.Background(), files, kinds)
}

// LoadFilesContext is LoadFiles under ctx: a cancelled ctx stops the reads
// (of the scenario files and of the system files they name). Each file is
// read through guardfile: a regular file, at most guardfile.Scenario.Max
// bytes, refused from its size before a byte of it is read.
func LoadFilesContext(ctx context.Context, files []string, kinds []*broker.Kind) ([]*Scenario, diag.Errors) {
	var scs []*Scenario
	var errs diag.Errors
	byName := map[string]*Scenario{}
	for _, f := range files {
		data, err := guardfile.Read(ctx, f, guardfile.Scenario)
		if err != nil {
			errs = append(errs, diag.Errorf(diag.Pos{File: f}, "%v", err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		fscs, ferrs := ParseContext(ctx, f, data, kinds)
		errs = append(errs, ferrs...)
		for _, sc := range fscs {
			if sc.Name == "" {
				continue // already reported as missing
			}
			if prev, dup := byName[sc.Name]; dup {
				errs = append(errs, diag.Errorf(sc.Pos, "scenario name %q is already used at %s", sc.Name, prev.Pos))
			}
			byName[sc.Name] = sc
			scs = append(scs, sc)
		}
	}
	errs.Sort()
	return scs, errs
}

// Parse decodes one scenario file into its scenarios: one, or one per matrix
// variant, against the brokers kinds. It returns every problem it finds;
// no scenario only when the file is not a YAML map at all.
func Parse(file string, data []byte, kinds []*broker.Kind) ([]*Scenario, diag.Errors) {
	return ParseContext(context.Background(), file, data, kinds)
}

// ParseContext is Parse reading the system file a system: key names under
// ctx.
func ParseContext(ctx context.Context, file string, data []byte, kinds []*broker.Kind) ([]*Scenario, diag.Errors) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, diag.Errors{diag.Errorf(diag.Pos{File: file, Line: 1, Col: 1}, "empty file: a scenario needs name and steps")}
		}
		return nil, diag.Errors{yamlError(file, data, err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, diag.Errors{diag.Errorf(diag.Pos{File: file, Line: extra.Line, Col: extra.Column}, "a second YAML document: a file holds one scenario")}
	} else if !errors.Is(err, io.EOF) {
		return nil, diag.Errors{yamlError(file, data, err)} // invalid YAML after ---
	}
	// The budget bounds what aliases add, not what is written: the nodes
	// written are in memory already (the decoder made them, and the file
	// cap bounds them), and a long generated workload (explore --random,
	// soak: seven nodes an event) is written out in full.
	budget := maxNodes + written(doc.Content[0], 0)
	root, err := resolveAliases(doc.Content[0], 0, &budget)
	if err != nil {
		return nil, diag.Errors{diag.Errorf(diag.NodePos(file, doc.Content[0]), "%v", err)}
	}
	if root.Kind != yaml.MappingNode {
		return nil, diag.Errors{diag.Errorf(diag.NodePos(file, root), "a scenario is a map with name and steps, got a %s", diag.KindName(root))}
	}
	if hasKey(root, "services") && !hasKey(root, "steps") {
		return nil, nil // a system file beside its scenarios: read through their system: key
	}
	return parseScenario(ctx, file, root, kinds)
}

// maxDepth bounds nesting, and so alias cycles such as &a [*a]; maxNodes
// bounds what aliases may add to the nodes written (a "billion laughs"
// file).
const (
	maxDepth = 64
	maxNodes = 100_000
)

// resolveAliases replaces every alias by (a copy of) its anchor's node and
// applies merge keys (<<: *base), so that the rest of the loader sees plain
// maps, lists and scalars. Positions stay those of the anchor.
func resolveAliases(n *yaml.Node, depth int, budget *int) (*yaml.Node, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested more than %d levels deep (an alias that contains itself?)", maxDepth)
	}
	if *budget--; *budget < 0 {
		return nil, fmt.Errorf("aliases expand to more than %d YAML nodes beyond those written", maxNodes)
	}
	if n.Kind == yaml.AliasNode {
		return resolveAliases(n.Alias, depth+1, budget)
	}
	c := *n
	c.Content = nil
	for i := 0; i < len(n.Content); i++ {
		child, err := resolveAliases(n.Content[i], depth+1, budget)
		if err != nil {
			return nil, err
		}
		isMergeKey := n.Kind == yaml.MappingNode && i%2 == 0 && child.Kind == yaml.ScalarNode && child.Tag == "!!merge"
		if !isMergeKey {
			c.Content = append(c.Content, child)
			continue
		}
		i++
		merged, err := resolveAliases(n.Content[i], depth+1, budget)
		if err != nil {
			return nil, err
		}
		sources := []*yaml.Node{merged}
		if merged.Kind == yaml.SequenceNode {
			sources = merged.Content
		}
		for _, src := range sources {
			if src.Kind != yaml.MappingNode {
				return nil, fmt.Errorf("line %d: a merge key (<<) needs a map or a list of maps", child.Line)
			}
			for j := 0; j+1 < len(src.Content); j += 2 {
				if !hasKey(n, src.Content[j].Value) { // keys written here win
					c.Content = append(c.Content, src.Content[j], src.Content[j+1])
				}
			}
		}
	}
	return &c, nil
}

// written counts the nodes of n as written: an alias is one node (it is
// not followed). Its depth is bounded as resolveAliases bounds it.
func written(n *yaml.Node, depth int) int {
	if depth > maxDepth || n.Kind == yaml.AliasNode {
		return 1
	}
	c := 1
	for _, k := range n.Content {
		c += written(k, depth+1)
	}
	return c
}

// yamlError points at the token that makes the file invalid YAML: yaml.v3
// gives only a line, often the enclosing block's.
func yamlError(file string, data []byte, err error) *diag.Error {
	p := diag.Locate(data, err)
	return diag.Errorf(diag.Pos{File: file, Line: p.Line, Col: p.Col}, "%s", p.Msg)
}

// header is a scenario file's top-level keys, before variants are expanded.
type header struct {
	Scenario
	ctx       context.Context // for the reads a key makes (system:)
	kinds     []*broker.Kind  // the brokers the file may name
	vars      map[string]string
	varPos    map[string]diag.Pos // where each vars: and matrix: name is defined
	axes      []axis
	stepsNode *yaml.Node
}

func parseScenario(ctx context.Context, file string, root *yaml.Node, kinds []*broker.Kind) ([]*Scenario, diag.Errors) {
	h, errs := parseHeader(ctx, file, root, kinds)
	errs = append(errs, h.checkNotJudged()...)
	if h.stepsNode == nil || h.stepsNode.Kind != yaml.SequenceNode || len(h.stepsNode.Content) == 0 {
		sc := h.Scenario
		return []*Scenario{&sc}, errs
	}
	var scs []*Scenario
	seen := map[string]bool{}
	exp := newExpansion() // one budget for all the variants
	for _, v := range combinations(h.axes) {
		sc := h.Scenario
		vars := maps.Clone(h.vars)
		for _, b := range v {
			vars[b.name] = b.value
		}
		var verrs diag.Errors
		vars = resolveVars(vars, h.varPos, exp, &verrs)
		for i := range v { // the label says the values as resolved
			v[i].value = vars[v[i].name]
		}
		sc.Vars = vars
		sc.Name = substituteText(sc.Name, vars, exp)
		sc.Description = substituteText(sc.Description, vars, exp)
		if len(v) > 0 {
			sc.Name += " " + v.Label()
			sc.Variant = v.Label()
		}
		for _, n := range h.stepsNode.Content {
			before := len(verrs)
			n = substitute(file, n, vars, exp, &verrs)
			if len(verrs) > before {
				continue // an undefined variable: its step cannot be judged further
			}
			call, serrs := parseStep(file, n, kindNames(kinds))
			verrs = append(verrs, serrs...)
			if call != nil {
				sc.Steps = append(sc.Steps, call)
				iso := call.Isolation()
				sc.Exclusive = sc.Exclusive || iso.Alone
				sc.BrokerExclusive = sc.BrokerExclusive || iso.AloneOnBroker
				sc.DBFaults = sc.DBFaults || iso.SplitDBs
			}
		}
		if sc.System != nil {
			verrs = append(verrs, sc.checkServices()...)
			verrs = append(verrs, sc.CheckPlaceholders(nil)...)
		}
		// A mistake outside ${...} repeats in every variant: report it once.
		for _, e := range verrs {
			if !seen[e.Error()] {
				seen[e.Error()] = true
				errs = append(errs, e)
			}
		}
		scs = append(scs, &sc)
	}
	return scs, errs
}

func parseHeader(ctx context.Context, file string, root *yaml.Node, kinds []*broker.Kind) (header, diag.Errors) {
	h := header{Scenario: Scenario{File: file, Pos: diag.NodePos(file, root), BrokerOptions: defaultBrokerOptions(kinds), brokerKeys: map[string]bool{}},
		ctx: ctx, kinds: kinds, vars: map[string]string{}, varPos: map[string]diag.Pos{}}
	var errs diag.Errors
	for _, kv := range diag.Pairs(file, root, &errs) {
		if strings.HasPrefix(kv.Key, "x-") {
			continue // free for anchors (x-base: &base {...}) and notes, as in compose files
		}
		k, ok := lookupTopKey(kv.Key, kinds)
		if !ok {
			errs = append(errs, diag.Errorf(kv.KeyPos, "unknown key %q%s; a scenario has: %s",
				kv.Key, diag.Suggest(kv.Key, topKeyNames(kinds)), strings.Join(topKeyNames(kinds), ", ")))
			continue
		}
		k.parse(file, kv, &h, &errs)
	}
	if variantCount(h.axes) > maxVariants {
		errs = append(errs, diag.Errorf(h.Pos, "matrix: more than %d combinations; split the file", maxVariants))
	}
	for _, a := range h.axes {
		if _, both := h.vars[a.name]; both {
			errs = append(errs, diag.Errorf(h.Pos, "variable %q is in both vars and matrix; keep one", a.name))
		}
	}
	if h.Name == "" && !hasKey(root, "name") {
		errs = append(errs, diag.Errorf(diag.NodePos(file, root), "missing name: every scenario needs a name"))
	}
	switch n := h.stepsNode; {
	case n == nil:
		errs = append(errs, diag.Errorf(diag.NodePos(file, root), "missing steps: a scenario needs at least one step"))
	case n.Kind != yaml.SequenceNode && n.ShortTag() != "!!null":
		errs = append(errs, diag.Errorf(diag.NodePos(file, n), "steps: want a list of steps, got a %s", diag.KindName(n)))
	case len(n.Content) == 0:
		errs = append(errs, diag.Errorf(diag.NodePos(file, n), "steps: the list is empty"))
	}
	return h, errs
}

func parseTags(file string, n *yaml.Node, errs *diag.Errors) []string {
	items := n.Content
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
		items = []*yaml.Node{n} // tags: seed
	} else if n.Kind != yaml.SequenceNode {
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "tags: want a list of words, e.g. [seed, outbox]"))
		return nil
	}
	var tags []string
	for _, t := range items {
		if t.Kind != yaml.ScalarNode || t.Value == "" || strings.ContainsAny(t.Value, " ,") {
			*errs = append(*errs, diag.Errorf(diag.NodePos(file, t), "tags: want a single word, got %s", diag.Describe(t)))
			continue
		}
		tags = append(tags, t.Value)
	}
	return tags
}

// HasOverrides reports whether any of the scenario's expectations or its
// expect_violations differ on broker b.
func (sc *Scenario) HasOverrides(b string) bool {
	if _, ok := sc.ExpectViolations[b]; ok {
		return true
	}
	for _, c := range sc.Steps {
		for _, o := range c.Expect.Outcomes {
			if o.Broker == b {
				return true
			}
		}
		for _, cw := range c.Expect.Checks {
			if cw.Broker == b {
				return true
			}
		}
	}
	return false
}

// Violations are the invariants the scenario declares it breaks on broker b.
func (sc *Scenario) Violations(b string) []string {
	if v, ok := sc.ExpectViolations[b]; ok {
		return v
	}
	return sc.ExpectViolations["default"]
}

// parseViolations reads expect_violations: a list of invariant names for
// every broker, or a map broker (one of brokers) → list with "default" for
// the others.
func parseViolations(file string, n *yaml.Node, brokers []string, errs *diag.Errors) map[string][]string {
	if n.Kind != yaml.MappingNode {
		return map[string][]string{"default": violationList(file, n, errs)}
	}
	keys := append([]string{"default"}, brokers...)
	out := map[string][]string{}
	for _, kv := range diag.Pairs(file, n, errs) {
		if !slices.Contains(keys, kv.Key) {
			*errs = append(*errs, diag.Errorf(kv.KeyPos, "expect_violations: unknown broker %q%s; keys: %s", kv.Key, diag.Suggest(kv.Key, keys), strings.Join(keys, ", ")))
			continue
		}
		out[kv.Key] = violationList(file, kv.Value, errs)
	}
	return out
}

// violationList reads a list of invariant names; [] declares none (on a
// broker where the damage does not occur, or written out as "none").
func violationList(file string, n *yaml.Node, errs *diag.Errors) []string {
	names := history.InvariantNames()
	if n.Kind != yaml.SequenceNode {
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "expect_violations: want a list of invariants, e.g. [lost], or a map broker → list; one of: %s", strings.Join(names, ", ")))
		return nil
	}
	out := []string{}
	for _, v := range n.Content {
		if v.Kind == yaml.ScalarNode && slices.Contains(out, v.Value) {
			*errs = append(*errs, diag.Errorf(diag.NodePos(file, v), "expect_violations: %s given twice", v.Value))
			continue
		}
		if _, ok := history.Invariants[v.Value]; v.Kind != yaml.ScalarNode || !ok {
			*errs = append(*errs, diag.Errorf(diag.NodePos(file, v), "expect_violations: unknown invariant %s%s; one of: %s",
				diag.Describe(v), diag.Suggest(v.Value, names), strings.Join(names, ", ")))
			continue
		}
		out = append(out, v.Value)
	}
	return out
}

// kindNames are the names of kinds, in order.
func kindNames(kinds []*broker.Kind) []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = k.Name
	}
	return out
}

func scalarString(file string, kv steps.Arg, errs *diag.Errors) string {
	n := kv.Value
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" || strings.TrimSpace(n.Value) == "" {
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "%s: want text, got %s", kv.Key, diag.Describe(n)))
		return ""
	}
	return n.Value
}

func hasKey(m *yaml.Node, key string) bool {
	for i := 0; i < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return true
		}
	}
	return false
}
