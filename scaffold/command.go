package scaffold

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/outboxdrill/runner/internal/lazy"
)

// Command is one service as --relay or --consumer gives it: a shell-like
// line whose leading NAME=VALUE words are its environment, as sh reads
// `DATABASE_URL=… python3 relay.py`. ${…} in either are the placeholders
// a system file's services are given (${producer_db.url}, ${stream}, …).
type Command struct {
	Argv []string
	Env  map[string]string
	// Dir is where its relative paths start ("": where init runs); a
	// compose service's is its build context.
	Dir string
	// Comments say where it came from (a compose file's rewrites).
	Comments []string
}

var envWord = lazy.Regexp(`^[A-Za-z_][A-Za-z0-9_]*=`)

// ParseCommand reads a command line: words split at blanks, 'single' and
// "double" quotes and backslashes as sh takes them, no expansion (a ${…}
// is kept for the runner).
func ParseCommand(line string) (Command, error) {
	words, err := splitWords(line)
	if err != nil {
		return Command{}, err
	}
	c := Command{Env: map[string]string{}}
	for len(words) > 0 && envWord().MatchString(words[0]) {
		k, v, _ := strings.Cut(words[0], "=")
		c.Env[k] = v
		words = words[1:]
	}
	if len(words) == 0 {
		return Command{}, errors.New("no command after its environment: give the program to run, e.g. 'DATABASE_URL=${producer_db.url} python3 relay.py'")
	}
	c.Argv = words
	return c, nil
}

// splitWords splits line as sh would, without expanding anything.
func splitWords(line string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord, quote := false, rune(0)
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote == '\'' && r != '\'', quote == '"' && r != '"' && r != '\\':
			cur.WriteRune(r)
		case quote != 0 && r == quote:
			quote = 0
		case r == '\\' && i+1 < len(rs) && (quote == 0 || strings.ContainsRune("\"\\$`", rs[i+1])):
			i++
			cur.WriteRune(rs[i])
			inWord = true
		case r == '\\':
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				words, inWord = append(words, cur.String()), false
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote", quote)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// Relocated is the command with its relative paths made relative to dir
// (where the system file is, and its services run) from cwd (where init
// ran): the program when it names a path, and each later word that names
// a file or directory that exists. notes say what was rewritten.
func (c Command) Relocated(cwd, dir string) (Command, []string) {
	from := "where init ran"
	switch {
	case filepath.IsAbs(c.Dir):
		cwd, from = c.Dir, c.Dir
	case c.Dir != "":
		cwd, from = filepath.Join(cwd, c.Dir), c.Dir
	}
	out := Command{Argv: slices.Clone(c.Argv), Env: maps.Clone(c.Env), Comments: c.Comments}
	var notes []string
	for i, w := range out.Argv {
		if filepath.IsAbs(w) || strings.Contains(w, "${") || strings.HasPrefix(w, "-") {
			continue
		}
		if i == 0 && !strings.Contains(w, "/") {
			continue // found on PATH
		}
		if _, err := os.Stat(filepath.Join(cwd, w)); err != nil {
			continue
		}
		rel := relative(dir, filepath.Join(cwd, w))
		if rel == w {
			continue
		}
		if i == 0 && !strings.Contains(rel, "/") {
			rel = "./" + rel
		}
		out.Argv[i] = rel
		notes = append(notes, fmt.Sprintf("%s (given as %s, relative to %s)", rel, w, from))
	}
	return out, notes
}

// relative is path abs as the file in dir names it: relative when the
// two share a top directory (a repository's out dir and its services),
// else absolute (/tmp/out and /home/…: "../../home/…" says nothing).
func relative(dir, abs string) string {
	top := func(p string) string { return strings.SplitN(strings.TrimPrefix(p, "/"), "/", 2)[0] }
	if top(dir) != top(abs) {
		return abs
	}
	if rel, err := filepath.Rel(dir, abs); err == nil {
		return rel
	}
	return abs
}

// Program says where the program is found when it is named without a
// path: the one PATH gives the runner (the services inherit its
// environment), e.g. "python3 is /usr/bin/python3".
func (c Command) Program() string {
	if strings.Contains(c.Argv[0], "/") || strings.Contains(c.Argv[0], "${") {
		return ""
	}
	if p, err := exec.LookPath(c.Argv[0]); err == nil {
		return c.Argv[0] + " is " + p
	}
	return c.Argv[0] + " is not on the PATH"
}
