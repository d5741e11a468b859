package diag

import (
	"fmt"

	"gopkg.in/yaml.v3"
)

// KindName names a node's kind for messages: map, list, scalar or alias.
func KindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "map"
	case yaml.SequenceNode:
		return "list"
	case yaml.AliasNode:
		return "alias"
	}
	return "scalar"
}

// NodePos is the position of n in file.
func NodePos(file string, n *yaml.Node) Pos {
	return Pos{File: file, Line: n.Line, Col: n.Column}
}

// Describe shows a node in a message: a scalar quoted, else its kind.
func Describe(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		if n.ShortTag() == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	if n.Kind == yaml.AliasNode {
		return "an alias"
	}
	return "a " + KindName(n)
}

// Pair is one key of a YAML map with its position and value node.
type Pair struct {
	Key    string
	KeyPos Pos
	Value  *yaml.Node
}

// Pairs lists the keys of map m in order. A key that is not a plain word,
// or one given twice, is an error naming where, and is left out.
func Pairs(file string, m *yaml.Node, errs *Errors) []Pair {
	var out []Pair
	seen := map[string]Pos{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		p := NodePos(file, k)
		if k.Kind != yaml.ScalarNode {
			*errs = append(*errs, Errorf(p, "a key must be a plain word, got a %s", KindName(k)))
			continue
		}
		if prev, dup := seen[k.Value]; dup {
			*errs = append(*errs, Errorf(p, "key %q given twice (first at line %d)", k.Value, prev.Line))
			continue
		}
		seen[k.Value] = p
		out = append(out, Pair{Key: k.Value, KeyPos: p, Value: v})
	}
	return out
}
