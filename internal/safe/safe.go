// Package safe makes user strings (scenario names, tags, labels, event ids,
// YAML values quoted in messages) fit to print: control characters shown
// Go-%q style so that a name cannot move the cursor, clear the screen or
// forge a line of its own on a terminal or in Markdown, and long values cut
// with a marker so that a 2 MB event id does not make megabytes of report.
package safe

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Max is the longest user value shown whole, in bytes; MaxLine the longest
// line of a message or trace (which quotes values among words of its own).
const (
	Max     = 200
	MaxLine = 2000
)

// Line is a user value for one line of text: every control character
// (newlines too) escaped, cut beyond Max bytes.
func Line(s string) string { return escape(cut(s, Max), false) }

// LongLine is one line of a message or trace built around user values:
// every control character (newlines too) escaped, each word (a run of
// non-blank characters: an event id quoted in it) cut beyond Max bytes,
// the line beyond MaxLine.
func LongLine(s string) string { return escape(cut(cutWords(s), MaxLine), false) }

// Text is a message of several lines: its line breaks (and tabs) kept,
// every other control character escaped, each line cut beyond MaxLine bytes.
func Text(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = escape(cut(cutWords(l), MaxLine), true)
	}
	return strings.Join(lines, "\n")
}

// Cut is s cut beyond Max bytes, not escaped (for JSON and XML, whose
// encoders escape).
func Cut(s string) string { return cut(s, Max) }

// CutLines is s with each word cut beyond Max bytes and each line beyond
// MaxLine, not escaped.
func CutLines(s string) string {
	if len(s) <= Max {
		return s
	}
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = cut(cutWords(l), MaxLine)
	}
	return strings.Join(lines, "\n")
}

// Value is v with every string in it (maps, slices, nested) cut beyond Max
// bytes: for parameters and observed state in JSON.
func Value(v any) any {
	switch v := v.(type) {
	case string:
		return Cut(v)
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[Cut(k)] = Value(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = Value(x)
		}
		return out
	case []string:
		out := make([]string, len(v))
		for i, x := range v {
			out[i] = Cut(x)
		}
		return out
	case map[string]string:
		out := make(map[string]string, len(v))
		for k, x := range v {
			out[Cut(k)] = Cut(x)
		}
		return out
	}
	return v
}

// cut keeps the first max bytes of s (whole runes) and says how long s was.
func cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	n := max
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…(" + thousands(len(s)) + " bytes)"
}

// cutWords cuts each run of non-blank characters of s beyond Max bytes.
func cutWords(s string) string {
	if len(s) <= Max {
		return s
	}
	var b strings.Builder
	start := -1 // of the current word
	flush := func(end int) {
		if start < 0 {
			return
		}
		w := s[start:end]
		if strings.Contains(w, "…(") && len(w) <= 2*Max {
			b.WriteString(w) // a value cut already, with a few characters around it
		} else {
			b.WriteString(cut(w, Max))
		}
		start = -1
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == ' ' || c == '\t' || c == '\n' {
			flush(i)
			b.WriteByte(c)
		} else if start < 0 {
			start = i
		}
	}
	flush(len(s))
	return b.String()
}

// thousands writes n with a comma every three digits: 2,000,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// escape shows control characters, invalid UTF-8 and the characters that
// reorder or hide text (bidi controls, line and paragraph separators) the
// way Go's %q does; keepBreaks keeps "\n" and "\t".
func escape(s string, keepBreaks bool) string {
	if !needsEscape(s, keepBreaks) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case keepBreaks && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case hidden(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
		i += size
	}
	return b.String()
}

func needsEscape(s string, keepBreaks bool) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || hidden(r) && !(keepBreaks && (r == '\n' || r == '\t')) {
			return true
		}
		i += size
	}
	return false
}

// hidden: C0 and C1 controls, DEL, bidi embeddings, overrides and
// isolates, line and paragraph separators, the byte-order mark.
func hidden(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r < 0xa0:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x2028, r == 0x2029, r == 0x200e, r == 0x200f, r == 0xfeff:
		return true
	}
	return false
}
