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
