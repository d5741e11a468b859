// Package redact hides the secrets of server URLs and connection strings in
// messages: one function for every form the runner takes (PostgreSQL URLs
// and keyword/value DSNs, redis://, nats://, amqp:// URLs, host:port lists),
// whether or not
// the text parses, and one for the errors their clients return (which may
// quote the text they could not parse).
package redact

import (
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/outboxdrill/runner/internal/lazy"
)

// Mask stands for a hidden secret.
const Mask = "***"

// URL is s with its password (and any other secret it recognises) replaced
// by Mask, the rest left as written: a URL's user info password (a NATS
// token: a user without a password), password-like query values, and
// password-like values of a keyword/value DSN (host=… password=…). Text it
// cannot parse is redacted by the same rules, best effort, over-masking
// rather than leaking.
func URL(s string) string {
	out := s
	for _, r := range spans(s) {
		out = out[:r.start] + Mask + out[r.end:]
	}
	return out
}

// Err is err with every secret of s hidden from its message, for errors a
// client returned about s (url.Parse and go-redis quote the text they could
// not parse). errors.Is and errors.As still see err.
func Err(s string, err error) error {
	if err == nil {
		return nil
	}
	msg := Text(s, err.Error())
	if msg == err.Error() {
		return err
	}
	return &redacted{msg: msg, err: err}
}

// Text is msg with s (as written or quoted) and each secret of s replaced.
func Text(s, msg string) string {
	secrets := Secrets(s)
	if len(secrets) == 0 {
		return msg
	}
	red := URL(s)
	msg = strings.ReplaceAll(msg, s, red)
	for _, sec := range secrets {
		msg = strings.ReplaceAll(msg, sec, Mask)
	}
	return msg
}

type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }

// minSecret is the shortest secret Text hides wherever it appears in a
// message: shorter ones would mask every such letter of the message (URL
// still hides them in the URL itself).
const minSecret = 3

// Secrets are the secret values in s as written and decoded (percent
// escapes, DSN quoting), longest first.
func Secrets(s string) []string {
	var out []string
	add := func(v string) {
		if len(v) >= minSecret && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	for _, r := range spans(s) {
		raw := s[r.start:r.end]
		add(raw)
		if d, err := url.PathUnescape(raw); err == nil {
			add(d)
		}
		if d, err := url.QueryUnescape(raw); err == nil {
			add(d)
		}
		if r.dsn {
			add(unquote(raw))
		}
	}
	// Parse errors quote the text (%q): a secret holding '"' or '\\' changes.
	for _, v := range out {
		q := strconv.Quote(v)
		add(q[1 : len(q)-1])
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// span is a secret's byte range in the text; dsn when a keyword/value
// DSN's value (maybe quoted).
type span struct {
	start, end int
	dsn        bool
}

// spans finds the secrets of s, sorted from last to first (so URL can
// replace them in order without moving the others).
func spans(s string) []span {
	var out []span
	switch i := strings.Index(s, "://"); {
	case i >= 0:
		out = urlSpans(s, i)
	case strings.Contains(s, "="):
		out = dsnSpans(s)
	case strings.Contains(s, "@"):
		out = hostSpans(s)
	}
	slices.SortFunc(out, func(a, b span) int { return b.start - a.start })
	return out
}

// urlSpans: the user info is what comes before the last '@' ahead of the
// query (an '@' in the query, ?application_name=a@b, is not the user
// info's end; one in a password is, however many there are). Unparsable,
// the last '@' of all ends it: over-masking rather than leaking.
func urlSpans(s string, schemeEnd int) []span {
	scheme := strings.ToLower(s[:schemeEnd])
	restStart := schemeEnd + len("://")
	rest := s[restStart:]
	head := rest
	if q := strings.IndexAny(rest, "?#"); q >= 0 {
		head = rest[:q]
	}
	at := strings.LastIndex(head, "@")
	if _, err := url.Parse(s); err != nil {
		// A password holding '?', '#' or '/' breaks the URL: its last '@'
		// ends the user info unless that '@' sits in a query value.
		if last := strings.LastIndex(rest, "@"); last > at && !strings.Contains(rest[len(head):last], "=") {
			at = last
		}
	}
	var out []span
	queryFrom := 0
	if at >= 0 {
		user := rest[:at]
		if c := strings.Index(user, ":"); c >= 0 {
			out = append(out, span{start: restStart + c + 1, end: restStart + at})
		} else if userIsToken(scheme, user) {
			out = append(out, span{start: restStart, end: restStart + at})
		}
		queryFrom = at + 1
	}
	if q := strings.Index(rest[queryFrom:], "?"); q >= 0 {
		qs := restStart + queryFrom + q + 1
		out = append(out, querySpans(s, qs)...)
	}
	return out
}

// userIsToken reports whether a URL's user info with no password is a
// secret. A user name alone is not one (postgres://postgres@host names the
// role; redis://, amqp:// likewise a user), so it is decided by the scheme
// and by the token's own form: NATS puts its token there (nats.go: "if no
// password, assume username is authToken"; the server's docs write
// nats://TOKEN@host:4222), on each of the URL schemes a NATS client takes;
// and a token of a known form is one whatever the scheme (a GitHub or
// GitLab token in https://TOKEN@host, as git remotes carry them).
func userIsToken(scheme, user string) bool {
	return tokenSchemes[strings.ToLower(scheme)] || knownToken().MatchString(user)
}

// tokenSchemes are the URL schemes of NATS clients (nats, tls, ws, wss).
var tokenSchemes = map[string]bool{"nats": true, "tls": true, "ws": true, "wss": true}

// knownToken is a user info that is a token by its form: GitHub's
// (ghp_, gho_, ghu_, ghs_, ghr_, github_pat_) and GitLab's (glpat-).
var knownToken = lazy.Regexp(`^(?:gh[pousr]_|github_pat_|glpat-)[A-Za-z0-9_-]{8,}$`)

// hostSpans: a list of user:password@host:port without a scheme (a
// --kafka value may carry user info it refuses): in each, the password
// (what follows the first ':' before its last '@'), or the whole user
// info when it has no ':' (a token).
func hostSpans(s string) []span {
	var out []span
	from := 0
	for _, part := range strings.Split(s, ",") {
		if at := strings.LastIndex(part, "@"); at >= 0 {
			start := from
			if c := strings.Index(part[:at], ":"); c >= 0 {
				start = from + c + 1
			}
			out = append(out, span{start: start, end: from + at})
		}
		from += len(part) + 1
	}
	return out
}

// querySpans are the password-like values of the query starting at from.
func querySpans(s string, from int) []span {
	var out []span
	end := len(s)
	if h := strings.Index(s[from:], "#"); h >= 0 {
		end = from + h
	}
	pos := from
	for pos <= end {
		next := strings.IndexAny(s[pos:end], "&;")
		pairEnd := end
		if next >= 0 {
			pairEnd = pos + next
		}
		pair := s[pos:pairEnd]
		if eq := strings.Index(pair, "="); eq >= 0 {
			key, err := url.QueryUnescape(pair[:eq])
			if err != nil {
				key = pair[:eq]
			}
			if secretKey(key) && eq+1 < len(pair) {
				out = append(out, span{start: pos + eq + 1, end: pairEnd})
			}
		}
		pos = pairEnd + 1
	}
	return out
}

// secretKey reports whether a query or DSN key names a secret.
func secretKey(k string) bool {
	k = strings.ToLower(strings.TrimSpace(k))
	for _, w := range []string{"pass", "pwd", "secret", "token"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// dsnSpans are the password-like values of a keyword/value DSN
// (libpq: key = value, the value bare up to a space or 'quoted' with
// backslash escapes).
func dsnSpans(s string) []span {
	var out []span
	i := 0
	for i < len(s) {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		ks := i
		for i < len(s) && s[i] != '=' && !isSpace(s[i]) {
			i++
		}
		key := s[ks:i]
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i >= len(s) || s[i] != '=' {
			if i == ks {
				i++
			}
			continue
		}
		i++ // '='
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		vs := i
		if i < len(s) && s[i] == '\'' {
			i++
			for i < len(s) && s[i] != '\'' {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			i = min(i+1, len(s))
		} else {
			for i < len(s) && !isSpace(s[i]) {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			i = min(i, len(s))
		}
		if secretKey(key) && i > vs {
			out = append(out, span{start: vs, end: i, dsn: true})
		}
	}
	return out
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// unquote is a DSN value without its quotes and backslash escapes.
func unquote(v string) string {
	v = strings.TrimPrefix(v, "'")
	v = strings.TrimSuffix(v, "'")
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}
