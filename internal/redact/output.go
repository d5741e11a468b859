package redact

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/outboxdrill/runner/internal/lazy"
)

// Set hides secrets in free text a program wrote (a team's service's
// output), which may show a secret in any encoding: as is, percent-encoded
// (url.QueryEscape, url.PathEscape, a URL's user info, JavaScript's
// encodeURIComponent, upper- or lower-case hex, + for a space), escaped in
// a JSON or Go string (\", \\, \/, \u003c). Every secret of every URL the
// runner handed out goes in (URLSecrets). Besides those, Text hides what is
// a password by its place whatever it is: the password of any URL's user
// info (scheme://user:PASSWORD@), a user info that is a token by its
// scheme or form (nats://TOKEN@: userIsToken), and the value of any password=… (a URL's
// query, a DSN, a log line) or "password": "…" (JSON): a secret shorter
// than minSecret is hidden there only (masking every "pw" of a text would
// garble it). A Set is safe for concurrent use.
type Set struct {
	known *regexp.Regexp // nil when no secret is long enough
}

// URLSecrets are the secrets of the URLs and DSNs given (see Secrets): their
// passwords, query and DSN password values and NATS tokens, as written and
// decoded, each once.
func URLSecrets(urls ...string) []string {
	var out []string
	for _, u := range urls {
		for _, s := range Secrets(u) {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}

// NewSet is the Set hiding secrets (plain values; their encodings are
// derived) and any password by its place.
func NewSet(secrets ...string) *Set {
	var long []string
	for _, s := range secrets {
		if len(s) >= minSecret && !slices.Contains(long, s) {
			long = append(long, s)
		}
	}
	if len(long) == 0 {
		return &Set{}
	}
	// Longest first: of two secrets one holds, the longer is hidden whole.
	slices.SortStableFunc(long, func(a, b string) int { return len(b) - len(a) })
	alts := make([]string, len(long))
	for i, s := range long {
		alts[i] = encodings(s)
	}
	return &Set{known: regexp.MustCompile(strings.Join(alts, "|"))}
}

// Text is text with every secret the set knows hidden in any encoding, and
// every password found by its place.
func (s *Set) Text(text string) string {
	if s != nil && s.known != nil {
		text = s.known.ReplaceAllLiteralString(text, Mask)
	}
	text = userInfo().ReplaceAllString(text, "${1}"+Mask+"@")
	text = userToken().ReplaceAllStringFunc(text, func(m string) string {
		sm := userToken().FindStringSubmatch(m)
		if !userIsToken(sm[1], sm[2]) {
			return m // a user name alone: postgres://postgres@host
		}
		return sm[1] + "://" + Mask + "@"
	})
	text = passwordValue().ReplaceAllString(text, "${1}"+Mask)
	return jsonPassword().ReplaceAllString(text, `${1}"`+Mask+`"`)
}

var (
	// userInfo is a URL's user:password@ (the scheme's name as RFC 3986
	// has it): the password up to the last '@' before the host. A password
	// holding an unencoded '/', '?', '#' or '@' breaks the URL for every
	// client too; a known secret is hidden anyway.
	userInfo = lazy.Regexp(`(\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@:'"<>]*:)[^\s/?#@'"<>]+@`)
	// userToken is a URL's user info without a password (scheme, user):
	// a secret where userIsToken says so, a NATS token above all.
	userToken = lazy.Regexp(`\b([A-Za-z][A-Za-z0-9+.-]*)://([^\s/?#@:'"<>]+)@`)
	// passwordValue is key=value where the key names a password
	// (password, sslpassword, DB_PASSWORD, passwd, pwd), the value bare up
	// to a blank, & or ;, or quoted.
	passwordValue = lazy.Regexp(`(?i)(\b[A-Za-z0-9_.-]*(?:password|passwd|pwd)\s*=\s*)('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\s&;'",]+)`)
	// jsonPassword is "password": "value" in JSON.
	jsonPassword = lazy.Regexp(`(?i)("[A-Za-z0-9_.-]*(?:password|passwd|pwd)"\s*:\s*)"(?:[^"\\]|\\.)*"`)
)

// encodings is a regular expression matching s in every encoding Set
// knows: each character as is or percent-encoded (any case of hex), a
// space also as +, a quote, backslash or slash also backslash-escaped, an
// ASCII punctuation or a non-ASCII character also as JSON's \uXXXX.
func encodings(s string) string {
	var b strings.Builder
	b.WriteString("(?:")
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		raw := s[i : i+size]
		i += size
		alts := []string{regexp.QuoteMeta(raw)}
		var pct strings.Builder
		for j := 0; j < len(raw); j++ {
			fmt.Fprintf(&pct, "%%(?i:%02X)", raw[j])
		}
		alts = append(alts, pct.String())
		switch {
		case r == ' ':
			alts = append(alts, `\+`)
		case r == '"' || r == '\\' || r == '/':
			alts = append(alts, `\\`+regexp.QuoteMeta(raw))
		}
		if r != utf8.RuneError && r < 0x10000 && (r >= 0x80 || !isAlnum(r)) {
			alts = append(alts, fmt.Sprintf(`\\u(?i:%04X)`, r))
		}
		b.WriteString("(?:" + strings.Join(alts, "|") + ")")
	}
	b.WriteString(")")
	return b.String()
}

func isAlnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

// Param is a value a scenario wrote for key (a service's environment
// variable, a step parameter) as shown in traces and reports: hidden whole
// when key names a secret (DB_PASSWORD, API_TOKEN), else with every
// password found by its place (Set.Text): a DSN's password=, a URL's user
// info, JSON's "password".
func Param(key, value string) string {
	if secretKey(key) && value != "" {
		return Mask
	}
	return (*Set)(nil).Text(value)
}
