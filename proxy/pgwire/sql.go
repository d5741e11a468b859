package pgwire

import "strings"

// statements splits a simple-query string into its statements the way the
// server does: at semicolons outside quotes, dollar quotes and comments.
// Empty statements are dropped.
func statements(q string) []string {
	var out []string
	start := 0
	flush := func(end int) {
		if s := strings.TrimSpace(q[start:end]); s != "" {
			out = append(out, s)
		}
	}
	for i := 0; i < len(q); i++ {
		switch c := q[i]; {
		case c == '\'' || c == '"':
			i = skipQuoted(q, i, c)
		case c == '-' && strings.HasPrefix(q[i:], "--"):
			if j := strings.IndexByte(q[i:], '\n'); j >= 0 {
				i += j
			} else {
				i = len(q)
			}
		case c == '/' && strings.HasPrefix(q[i:], "/*"):
			if j := strings.Index(q[i+2:], "*/"); j >= 0 {
				i += j + 3
			} else {
				i = len(q)
			}
		case c == '$':
			i = skipDollar(q, i)
		case c == ';':
			flush(i)
			start = i + 1
		}
	}
	flush(len(q))
	return out
}

// skipQuoted returns the index of the quote closing the one at i (” and
// "" inside are escapes and simply reopen).
func skipQuoted(q string, i int, quote byte) int {
	for j := i + 1; j < len(q); j++ {
		if q[j] == quote {
			return j
		}
	}
	return len(q)
}

// skipDollar skips a $tag$...$tag$ string starting at i; a $ that opens no
// dollar quote (a $1 parameter) is skipped alone.
func skipDollar(q string, i int) int {
	j := i + 1
	for j < len(q) && (q[j] == '_' || q[j] >= 'a' && q[j] <= 'z' || q[j] >= 'A' && q[j] <= 'Z' || q[j] >= '0' && q[j] <= '9' && j > i+1) {
		j++
	}
	if j >= len(q) || q[j] != '$' {
		return i
	}
	tag := q[i : j+1]
	if k := strings.Index(q[j+1:], tag); k >= 0 {
		return j + k + len(tag)
	}
	return len(q)
}

// isCommit reports whether one statement ends its transaction with a
// commit: COMMIT or END, with the optional WORK/TRANSACTION noise word.
// COMMIT PREPARED and AND CHAIN are not this boundary.
func isCommit(stmt string) bool {
	f := strings.Fields(strings.ToUpper(strings.TrimSpace(strings.TrimRight(stmt, "; \t\r\n"))))
	if len(f) == 0 || f[0] != "COMMIT" && f[0] != "END" {
		return false
	}
	return len(f) == 1 || len(f) == 2 && (f[1] == "WORK" || f[1] == "TRANSACTION")
}
