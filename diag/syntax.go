// Package diag locates YAML syntax errors in the source text.
//
// gopkg.in/yaml.v3 reports a syntax error as "yaml: line N: what", where N is
// often the line of the enclosing block (for parser errors counted from 0, so
// one line early), no column, and a vague what ("did not find expected key").
// Locate rescans the text with a small model of YAML's block and flow
// structure and points at the offending token instead: a tab in indentation,
// a bracket or quote never closed, a key whose indentation matches no
// enclosing block, a key indented under a value that is already complete.
package diag

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/outboxdrill/runner/internal/lazy"
)

// Problem is a located syntax error: 1-based line and column (in
// characters, like yaml.Node.Column) and what is wrong.
type Problem struct {
	Line, Col int
	Msg       string
	found     int // the line where the scan noticed it (end of file for "never closed")
}

var yamlMsg = lazy.Regexp(`^yaml: (?:line (\d+): )?(.*)$`)

// parserErrors are yaml.v3's parser errors: their line is the 0-based line
// of the enclosing node, printed as if 1-based.
var parserErrors = map[string]bool{
	"did not find expected <stream-start>":   true,
	"did not find expected <document start>": true,
	"found incompatible YAML document":       true,
	"found duplicate %YAML directive":        true,
	"found duplicate %TAG directive":         true,
	"found undefined tag handle":             true,
	"did not find expected key":              true,
	"did not find expected '-' indicator":    true,
	"did not find expected node content":     true,
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
}

var readerErrors = []string{
	"control characters are not allowed",
	"invalid leading UTF-8 octet",
	"incomplete UTF-8 octet sequence",
	"invalid trailing UTF-8 octet",
	"invalid length of a UTF-8 sequence",
	"invalid Unicode character",
}

var unknownAnchor = lazy.Regexp(`^unknown anchor '(.*)' referenced$`)

// Locate says where in src the yaml.v3 error err is, and what is wrong. The
// position is always within src: line 1..number of lines, column 1..length
// of the line plus one.
func Locate(src []byte, err error) Problem {
	text := err.Error()
	line, what := 0, strings.TrimPrefix(text, "yaml: ")
	if m := yamlMsg().FindStringSubmatch(text); m != nil {
		line, _ = strconv.Atoi(m[1])
		what = m[2]
		if parserErrors[what] && line > 0 {
			line++
		}
	}
	lines := splitLines(src)
	clamp := func(p Problem) Problem {
		p.Line = min(max(p.Line, 1), len(lines))
		p.Col = min(max(p.Col, 1), utf8.RuneCountInString(lines[p.Line-1])+1)
		return p
	}
	for _, r := range readerErrors {
		if what == r {
			return clamp(badByte(src))
		}
	}
	if m := unknownAnchor().FindStringSubmatch(what); m != nil {
		return clamp(findAlias(lines, m[1]))
	}
	if strings.HasPrefix(what, "did not find expected ',' or ") {
		if p, ok := unquotedVar(lines, line); ok {
			return clamp(p)
		}
	}
	for _, p := range Scan(src) {
		// yaml.v3 names the line where the error was found or an enclosing
		// node's: the cause is not before it (one line of slack for an
		// enclosing flow collection's or quoted scalar's context).
		if line == 0 || p.found >= line-1 {
			return clamp(p)
		}
	}
	p := Problem{Line: line, Msg: "invalid YAML: " + what}
	if line >= 1 && line <= len(lines) {
		p.Col = firstNonBlank(lines[line-1]) + 1
	}
	return clamp(p)
}

// flowVar is a ${name} written bare as a value in a flow collection.
var flowVar = lazy.Regexp(`[:,\[{]\s*(\$\{[A-Za-z_][A-Za-z0-9_]*\})`)

// unquotedVar finds, from the line before line on, a ${name} written bare
// inside {…} or […]: YAML reads its "{" as a nested map, so the collection
// never closes.
func unquotedVar(lines []string, line int) (Problem, bool) {
	for i := max(line-2, 0); i < min(line+1, len(lines)); i++ {
		if m := flowVar().FindStringSubmatchIndex(lines[i]); m != nil && strings.ContainsAny(lines[i][:m[2]], "{[") {
			v := lines[i][m[2]:m[3]]
			return Problem{Line: i + 1, Col: utf8.RuneCountInString(lines[i][:m[2]]) + 1,
				Msg: fmt.Sprintf("invalid YAML: %s inside {…} or […] must be quoted: write \"%s\" (its { would open a map)", v, v)}, true
		}
	}
	return Problem{}, false
}

// splitLines splits src into lines without their line breaks; there is
// always at least one.
func splitLines(src []byte) []string {
	s := strings.ReplaceAll(string(src), "\r\n", "\n")
	lines := strings.Split(s, "\n")
	if len(lines) > 1 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

func firstNonBlank(s string) int {
	for i, r := range []rune(s) {
		if r != ' ' && r != '\t' {
			return i
		}
	}
	return 0
}

// badByte finds the first byte that is not UTF-8 or a character YAML does
// not allow in a file.
func badByte(src []byte) Problem {
	line, col := 1, 1
	for i := 0; i < len(src); {
		r, n := utf8.DecodeRune(src[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			return Problem{Line: line, Col: col, Msg: fmt.Sprintf("byte 0x%02x is not UTF-8: save the file as UTF-8", src[i])}
		case !printable(r) && !(r == 0xFEFF && i == 0):
			return Problem{Line: line, Col: col, Msg: fmt.Sprintf("control character %U is not allowed in YAML (in a double-quoted string, write it as an escape)", r)}
		case r == '\n':
			line, col = line+1, 0
		}
		i += n
		col++
	}
	return Problem{Line: line, Col: col, Msg: "invalid YAML: a character that is not allowed"}
}

// printable is YAML's c-printable, plus the line breaks.
func printable(r rune) bool {
	return r == '\t' || r == '\n' || r == '\r' || r >= 0x20 && r <= 0x7E || r == 0x85 ||
		r >= 0xA0 && r <= 0xD7FF || r >= 0xE000 && r <= 0xFFFD && r != 0xFEFF || r >= 0x10000 && r <= 0x10FFFF
}

// findAlias points at the first alias *name that no anchor &name defines.
func findAlias(lines []string, name string) Problem {
	var anchors []string
	for _, l := range lines {
		for _, m := range anchorRe().FindAllStringSubmatch(l, -1) {
			anchors = append(anchors, m[1])
		}
	}
	msg := fmt.Sprintf("alias *%s: no anchor &%s before it%s", name, name, suggest(name, anchors))
	for i, l := range lines {
		for j := strings.Index(l, "*"+name); j >= 0; {
			end := j + 1 + len(name)
			if end == len(l) || strings.ContainsRune(" \t,]}:", rune(l[end])) {
				return Problem{Line: i + 1, Col: utf8.RuneCountInString(l[:j]) + 1, Msg: msg}
			}
			k := strings.Index(l[end:], "*"+name)
			if k < 0 {
				break
			}
			j = end + k
		}
	}
	return Problem{Line: 1, Col: 1, Msg: msg}
}

var anchorRe = lazy.Regexp(`(?:^|[\s\[{,])&([^\s,\[\]{}:]+)`)

// suggest is " (did you mean &x?)" for an anchor one or two edits away.
func suggest(name string, anchors []string) string {
	best, bestD := "", 3
	for _, a := range anchors {
		if d := distance(name, a); d < bestD {
			best, bestD = a, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean &%s?)", best)
}

// Scan returns the syntax problems it recognises in src, in file order. It
// models only what it needs to point at a token; on a file yaml.v3 rejects,
// the first problem at or after yaml.v3's line is the one to report.
func Scan(src []byte) []Problem {
	s := &scanner{}
	lines := splitLines(src)
	for i, l := range lines {
		s.n = i + 1
		s.line(i+1, []rune(l))
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
			s.prev = t
		}
	}
	for _, o := range s.flow {
		if s.quote != 0 {
			break // the quote is the cause
		}
		s.add(o.line, o.col, "this %q is never closed: no %q after it", string(o.ch), string(closer(o.ch)))
	}
	if s.quote != 0 {
		s.add(s.quoteAt.line, s.quoteAt.col, "this %s quote is never closed", quoteName(s.quote))
	}
	sort.SliceStable(s.problems, func(i, j int) bool {
		a, b := s.problems[i], s.problems[j]
		return a.Line < b.Line || a.Line == b.Line && a.Col < b.Col
	})
	return s.problems
}

func closer(open rune) rune {
	if open == '[' {
		return ']'
	}
	return '}'
}

func quoteName(q rune) string {
	if q == '"' {
		return "double"
	}
	return "single"
}

type mark struct {
	line, col int // 1-based
	ch        rune
}

// level is an open block collection: a map whose keys, or a list whose
// "- " items, are at column col (0-based).
type level struct {
	col   int
	seq   bool
	line  int
	first string // the first key, for messages
}

// opener is a line that ended with its value still to come ("key:", "-").
type opener struct {
	col  int
	line int
	name string
}

type scanner struct {
	problems []Problem
	flow     []mark
	quote    rune
	quoteAt  mark
	levels   []level
	open     *opener // the previous line's empty value, if any
	plain    bool    // the previous value was a plain scalar (may continue)
	lastKey  *opener // the previous line's key, for "too deep"
	block    *blockScalar
	lax      bool // complex keys (? :) seen: no indentation checks
	n        int  // the line being scanned
	prev     string
}

type blockScalar struct {
	parent int // content is indented more than this
	indent int // content indentation, once known (-1 until then)
}

func (s *scanner) add(line, col int, format string, args ...any) {
	s.problems = append(s.problems, Problem{Line: line, Col: col, Msg: fmt.Sprintf(format, args...), found: max(line, s.n)})
}

const tabMsg = "a tab in indentation; YAML indents with spaces"

// line handles one line of text (1-based number n).
func (s *scanner) line(n int, r []rune) {
	c := 0
	switch {
	case s.quote != 0 || len(s.flow) > 0:
		// Inside a quoted scalar or flow collection indentation is free.
		s.inline(n, r, 0, false)
		return
	case s.block != nil:
		if s.blockLine(n, r) {
			return
		}
	}
	for c < len(r) && r[c] == ' ' {
		c++
	}
	if c < len(r) && r[c] == '\t' {
		s.add(n, c+1, tabMsg)
		return
	}
	if c == len(r) || r[c] == '#' {
		return // blank or comment
	}
	if c == 0 && (hasPrefixWord(r, "---") || hasPrefixWord(r, "...")) {
		s.levels, s.open, s.lastKey, s.plain = nil, nil, nil, false
		if len(r) > 3 {
			s.inline(n, r, 3, true)
		}
		return
	}
	if c == 0 && r[0] == '%' {
		return // directive
	}
	if (r[c] == '?' || r[c] == ':') && (c+1 == len(r) || r[c+1] == ' ') {
		s.lax = true
	}
	if s.lax {
		s.inline(n, r, c, true)
		return
	}
	startLine, dash := true, c-1
	for r[c] == '-' && (c+1 == len(r) || r[c+1] == ' ' || r[c+1] == '\t') {
		if !s.item(n, c, true, "-", startLine) {
			return
		}
		startLine, dash = false, c
		for c++; c < len(r) && r[c] == ' '; c++ {
		}
		if c < len(r) && r[c] == '\t' {
			s.add(n, c+1, tabMsg)
			return
		}
		if c == len(r) || r[c] == '#' {
			s.open = &opener{col: dash, line: n, name: "-"}
			return
		}
	}
	colon := keyColon(r, c)
	if colon < 0 {
		if !s.item(n, c, false, strings.TrimSpace(string(r[c:])), startLine) {
			return
		}
		s.value(n, r, c, dash)
		return
	}
	name := strings.TrimSpace(string(r[c:colon]))
	if !s.item(n, c, false, name+":", startLine) {
		return
	}
	s.levelAt(c).first = firstOr(s.levelAt(c).first, name)
	s.lastKey = &opener{col: c, line: n, name: name}
	s.value(n, r, colon+1, c)
}

func firstOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func hasPrefixWord(r []rune, p string) bool {
	return strings.HasPrefix(string(r), p) && (len(r) == len(p) || r[len(p)] == ' ' || r[len(p)] == '\t')
}

// levelAt returns the innermost level at column c (item just pushed it).
func (s *scanner) levelAt(c int) *level {
	for i := len(s.levels) - 1; i >= 0; i-- {
		if s.levels[i].col == c {
			return &s.levels[i]
		}
	}
	return &level{}
}

// item checks the indentation of a "- " item (dash) or a key or other
// content (dash false) at column c of line n, and updates the open blocks.
// It returns false after reporting a problem.
func (s *scanner) item(n, c int, dash bool, what string, startLine bool) bool {
	open, lastKey, plain := s.open, s.lastKey, s.plain
	s.open, s.plain = nil, false
	isKey := strings.HasSuffix(what, ":") && !dash
	if !isKey {
		s.lastKey = nil
	}
	if !startLine {
		// After "- " on the same line: a new block inside the item.
		if dash || isKey {
			s.levels = append(s.levels, level{col: c, seq: dash, line: n})
		}
		return true
	}
	var popped *level
	for len(s.levels) > 0 && s.levels[len(s.levels)-1].col > c {
		l := s.levels[len(s.levels)-1]
		popped = &l
		s.levels = s.levels[:len(s.levels)-1]
	}
	// A key at the column of an indentless list ends the list.
	if !dash && len(s.levels) >= 2 {
		top, below := s.levels[len(s.levels)-1], s.levels[len(s.levels)-2]
		if top.seq && top.col == c && !below.seq && below.col == c {
			s.levels = s.levels[:len(s.levels)-1]
		}
	}
	var top *level
	if len(s.levels) > 0 {
		top = &s.levels[len(s.levels)-1]
	}
	col := c + 1
	switch {
	case top != nil && top.col == c && top.seq == dash && (dash || isKey):
		return true // a sibling
	case top != nil && top.col == c && dash && open != nil && open.col == c:
		s.levels = append(s.levels, level{col: c, seq: true, line: n}) // key:\n- item
		return true
	case top != nil && top.col == c && dash:
		s.add(n, col, "a list item among the keys of the map at line %d: indent it under a key that has no value", top.line)
		return false
	case top != nil && top.col == c && top.seq:
		s.add(n, col, "%s is not a list item: the items of the list at line %d start with \"- \" at column %d", quote(what), top.line, col)
		return false
	case top != nil && top.col == c:
		s.add(n, col, "%s is not a key: the keys of the map at line %d end with \":\"", quote(what), top.line)
		return false
	case open != nil && c > open.col:
		s.levels = append(s.levels, level{col: c, seq: dash, line: n})
		return true
	case popped != nil:
		msg := fmt.Sprintf("%s at column %d lines up with nothing: indent it to column %d (like %s, line %d)", quote(what), col, popped.col+1, levelName(popped), popped.line)
		if top != nil {
			msg += fmt.Sprintf(" or column %d (like %s, line %d)", top.col+1, levelName(top), top.line)
		}
		s.add(n, col, "%s", msg)
		return false
	case top == nil:
		s.levels = append(s.levels, level{col: c, seq: dash, line: n})
		return true
	case isKey && lastKey != nil && lastKey.col < c:
		s.add(n, col, "%s is indented too deep: %s on line %d already has a value, so a key of the same map goes at column %d", quote(what), quote(lastKey.name+":"), lastKey.line, lastKey.col+1)
		return false
	case top.seq && (isKey || dash && !plain):
		msg := fmt.Sprintf("%s is indented too deep: the list item before it already has a value; a new item starts with \"- \" at column %d", quote(what), top.col+1)
		if item, ok := strings.CutPrefix(s.prev, "- "); ok && isKey && !strings.HasSuffix(item, ":") && !strings.ContainsAny(item, "{[#") {
			// - relay(skip_mark) then expect: under it: the item meant
			// to be a key with expect beside it.
			msg += fmt.Sprintf(", or, to give that item this key, end it with \":\" (- %s:)", item)
		}
		s.add(n, col, "%s", msg)
		return false
	case isKey || dash && !plain:
		s.add(n, col, "%s is indented too deep: the line before already has a value; align it with column %d", quote(what), top.col+1)
		return false
	}
	s.plain = plain // the continuation of a multi-line plain scalar
	return false
}

func levelName(l *level) string {
	if l.seq {
		return `the "- " items`
	}
	if l.first == "" {
		return "the keys"
	}
	return quote(l.first + ":")
}

func quote(s string) string {
	if len([]rune(s)) > 40 {
		s = string([]rune(s)[:37]) + "..."
	}
	return strconv.Quote(s)
}

// keyColon returns the index of the ':' that makes r[c:] a "key: value"
// line, or -1.
func keyColon(r []rune, c int) int {
	i := c
	for i < len(r) && (r[i] == '&' || r[i] == '!') { // anchor or tag first
		for i < len(r) && r[i] != ' ' {
			i++
		}
		for i < len(r) && r[i] == ' ' {
			i++
		}
	}
	if i == len(r) {
		return -1
	}
	switch r[i] {
	case '"', '\'':
		q := r[i]
		for i++; i < len(r); i++ {
			if q == '"' && r[i] == '\\' {
				i++
			} else if r[i] == q {
				if q == '\'' && i+1 < len(r) && r[i+1] == '\'' {
					i++
					continue
				}
				break
			}
		}
		for i++; i < len(r) && r[i] == ' '; i++ {
		}
		if i < len(r) && r[i] == ':' && (i+1 == len(r) || r[i+1] == ' ' || r[i+1] == '\t') {
			return i
		}
		return -1
	case '[', '{', '|', '>', '#':
		return -1
	}
	for ; i < len(r); i++ {
		if r[i] == ':' && (i+1 == len(r) || r[i+1] == ' ' || r[i+1] == '\t') {
			return i
		}
		if r[i] == '#' && i > 0 && (r[i-1] == ' ' || r[i-1] == '\t') {
			return -1
		}
	}
	return -1
}

// value scans a block value starting at r[c] (after "key:" or at the start
// of an item), whose enclosing block's keys are at column parent.
func (s *scanner) value(n int, r []rune, c, parent int) {
	for c < len(r) && (r[c] == ' ' || r[c] == '\t') {
		c++
	}
	for c < len(r) && (r[c] == '&' || r[c] == '!') { // anchor or tag
		for c < len(r) && r[c] != ' ' && r[c] != '\t' {
			c++
		}
		for c < len(r) && (r[c] == ' ' || r[c] == '\t') {
			c++
		}
	}
	if c == len(r) || r[c] == '#' {
		s.open = &opener{col: parent, line: n}
		return
	}
	if r[c] == '|' || r[c] == '>' {
		s.block = &blockScalar{parent: parent, indent: -1}
		for _, ch := range r[c+1:] {
			if ch >= '1' && ch <= '9' {
				s.block.indent = parent + int(ch-'0')
			}
			if ch == ' ' || ch == '#' {
				break
			}
		}
		return
	}
	s.plain = !strings.ContainsRune("[{\"'*", r[c])
	s.inline(n, r, c, true)
}

// blockLine handles a line while a block scalar is open; false when the
// line ends it.
func (s *scanner) blockLine(n int, r []rune) bool {
	b := s.block
	c := 0
	for c < len(r) && r[c] == ' ' {
		c++
	}
	if c < len(r) && r[c] == '\t' && (b.indent < 0 && c > b.parent || c < b.indent) {
		s.add(n, c+1, tabMsg)
		s.block = nil
		return true
	}
	if strings.TrimSpace(string(r)) == "" {
		return true
	}
	if c > b.parent && (b.indent < 0 || c >= b.indent) {
		if b.indent < 0 {
			b.indent = c
		}
		return true
	}
	s.block = nil
	return false
}

// inline scans r from c for quotes, brackets and comments; block is
// whether the text starts in block context (a value or a document).
// tokStart is whether a token may start at c (a quote opens a string there).
func (s *scanner) inline(n int, r []rune, c int, block bool) {
	tokStart := block || len(s.flow) > 0
	for ; c < len(r); c++ {
		ch := r[c]
		stop := false
		switch {
		case s.quote != 0:
			c, tokStart, stop = s.quoted(n, r, c, tokStart)
		case ch == ' ' || ch == '\t':
		case ch == '#' && (c == 0 || r[c-1] == ' ' || r[c-1] == '\t'):
			return
		case len(s.flow) > 0:
			tokStart, stop = s.flowChar(n, r, c, tokStart)
		case tokStart: // block context
			c, tokStart, stop = s.blockStart(n, r, c)
		case ch == ':' && (c+1 == len(r) || r[c+1] == ' ' || r[c+1] == '\t'):
			s.add(n, c+1, "a second \":\" on the line: a value cannot be a \"key: value\" pair; put the value in quotes if the \":\" belongs to it")
			return
		}
		if stop {
			return
		}
	}
}

// quoted scans r[c] inside a quoted string: an escape, a doubled single
// quote, or the closing quote. stop: the line's scan is over.
func (s *scanner) quoted(n int, r []rune, c int, tokStart bool) (next int, tok, stop bool) {
	ch := r[c]
	switch {
	case s.quote == '"' && ch == '\\':
		c++
		if c < len(r) && !strings.ContainsRune("0abt\tnvfre \"/\\N_LPxuU", r[c]) {
			s.add(n, c, "unknown escape \\%c in a double-quoted string (write \\\\ for a backslash, or use single quotes)", r[c])
		}
	case ch == s.quote && s.quote == '\'' && c+1 < len(r) && r[c+1] == '\'':
		c++
	case ch == s.quote:
		s.quote = 0
		if len(s.flow) == 0 {
			s.after(n, r, c+1, ch)
			return c, false, true
		}
		return c, false, false
	}
	return c, tokStart, false
}

// flowChar scans r[c] inside a flow collection ([...] or {...}).
func (s *scanner) flowChar(n int, r []rune, c int, tokStart bool) (tok, stop bool) {
	switch ch := r[c]; ch {
	case '[', '{':
		s.flow = append(s.flow, mark{n, c + 1, ch})
		return true, false
	case ']', '}':
		if !s.close(n, c, ch) {
			return tokStart, true
		}
		if len(s.flow) == 0 {
			s.after(n, r, c+1, ch)
			return tokStart, true
		}
		return false, false
	case ',', ':':
		return true, false
	case '"', '\'':
		if tokStart {
			s.quote, s.quoteAt = ch, mark{n, c + 1, ch}
		}
		return tokStart, false
	}
	return false, false
}

// blockStart scans r[c], where a token may start in block context: a flow
// collection, a quoted string, an anchor or tag, or a plain value.
func (s *scanner) blockStart(n int, r []rune, c int) (next int, tok, stop bool) {
	switch ch := r[c]; ch {
	case '[', '{':
		s.flow = append(s.flow, mark{n, c + 1, ch})
		return c, true, false
	case '"', '\'':
		s.quote, s.quoteAt = ch, mark{n, c + 1, ch}
		return c, true, false
	case ']', '}':
		s.add(n, c+1, "this %q closes nothing: no %q before it", string(ch), string(opening(ch)))
		return c, true, true
	case '@', '`':
		s.add(n, c+1, "%q cannot start a plain value: put the value in quotes", string(ch))
		return c, true, true
	case '&', '!':
		for c+1 < len(r) && r[c+1] != ' ' {
			c++
		}
		return c, true, false
	}
	return c, false, false
}

func opening(close rune) rune {
	if close == ']' {
		return '['
	}
	return '{'
}

// close matches a closing bracket at r[c] against the open ones.
func (s *scanner) close(n, c int, ch rune) bool {
	top := s.flow[len(s.flow)-1]
	if top.ch == opening(ch) {
		s.flow = s.flow[:len(s.flow)-1]
		return true
	}
	for i := len(s.flow) - 2; i >= 0; i-- {
		if s.flow[i].ch == opening(ch) {
			for _, o := range s.flow[i+1:] {
				s.add(o.line, o.col, "this %q is never closed: the %q at line %d, column %d closes the %q at line %d, column %d", string(o.ch), string(ch), n, c+1, string(s.flow[i].ch), s.flow[i].line, s.flow[i].col)
			}
			s.flow = s.flow[:i]
			return true
		}
	}
	s.add(n, c+1, "this %q does not close the %q at line %d, column %d", string(ch), string(top.ch), top.line, top.col)
	s.flow = s.flow[:len(s.flow)-1]
	return false
}

// after checks the rest of a line after a flow collection or quoted scalar
// closed in block context: only a comment, or ":" if it was a key.
func (s *scanner) after(n int, r []rune, c int, closed rune) {
	for ; c < len(r); c++ {
		switch {
		case r[c] == ' ' || r[c] == '\t':
		case r[c] == '#' && (r[c-1] == ' ' || r[c-1] == '\t'):
			return
		case r[c] == ':' && (c+1 == len(r) || r[c+1] == ' '):
			s.inline(n, r, c+1, true)
			return
		case r[c] == ']' || r[c] == '}':
			s.add(n, c+1, "this %q closes nothing: no %q before it", string(r[c]), string(opening(r[c])))
			return
		default:
			s.add(n, c+1, "unexpected text after the closing %q: a comment starts with \" #\"", string(closed))
			return
		}
	}
}
