package redact

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
)

// Every encoding of a password a service may print is hidden: the red
// team's P%40ss%2Fw0rd%3A1 and ?password=… came through.
func TestSetHidesEveryEncoding(t *testing.T) {
	const pw = "P@ss/w0rd:1"
	set := NewSet(URLSecrets("postgres://u:P%40ss%2Fw0rd%3A1@127.0.0.1:5432/p", "redis://:r3d1s%20pw@127.0.0.1:6379/0")...)
	jsonOf := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	for _, text := range []string{
		"raw " + pw,
		"query-escaped " + url.QueryEscape(pw),
		"path-escaped " + url.PathEscape(pw),
		"user info " + url.UserPassword("u", pw).String(),
		"lower-case hex P%40ss%2fw0rd%3a1",
		"every byte %50%40%73%73%2F%77%30%72%64%3A%31",
		"JSON " + jsonOf(pw) + ` or with an escaped slash "P@ss\/w0rd:1"`,
		"in a query ?sslmode=disable&password=" + url.QueryEscape(pw) + "&x=1",
		"DSN host=h password=" + pw + " dbname=d",
		"a space: r3d1s pw, r3d1s+pw, r3d1s%20pw",
	} {
		got := set.Text(text)
		for _, leak := range []string{"ss/w0rd", "ss%2Fw0rd", "ss%2fw0rd", `ss\/w0rd`, "%73%73", "r3d1s"} {
			if strings.Contains(got, leak) {
				t.Errorf("%q → %q: %s shows", text, got, leak)
			}
		}
		if !strings.Contains(got, Mask) {
			t.Errorf("%q → %q: nothing hidden", text, got)
		}
	}
	// A JSON encoder's \u escapes (Go escapes <, > and &).
	set = NewSet("a<b&c>d")
	b, _ := json.Marshal(map[string]string{"secret_value": "a<b&c>d"})
	if got := set.Text(string(b)); strings.Contains(got, `\u003cb`) || !strings.Contains(got, Mask) {
		t.Errorf("JSON \\u escapes: %s → %s", b, got)
	}
}

// A password is hidden by its place whatever it is: a URL's user info,
// password=, "password": — a short one (which is never hidden elsewhere,
// or every "pw" of a text would be) included.
func TestSetHidesPasswordsByPlace(t *testing.T) {
	set := NewSet(URLSecrets("postgres://u:pw@127.0.0.1:5432/p")...)
	for in, want := range map[string]string{
		"connecting to postgres://u:pw@127.0.0.1:41234/p?sslmode=disable": "connecting to postgres://u:***@127.0.0.1:41234/p?sslmode=disable",
		"postgres://u@h/p?password=pw&sslmode=disable":                    "postgres://u@h/p?password=***&sslmode=disable",
		"dsn: host=h user=u password=pw dbname=p":                         "dsn: host=h user=u password=*** dbname=p",
		"DB_PASSWORD='p w' next":                                          "DB_PASSWORD=*** next",
		`{"user":"u","password":"pw","db":"p"}`:                           `{"user":"u","password":"***","db":"p"}`,
		"redis://:someone-elses@10.0.0.1:6379/0":                          "redis://:***@10.0.0.1:6379/0",
		"pwd is /tmp/pw; upward; PW":/* a short secret elsewhere is text */ "pwd is /tmp/pw; upward; PW",
		"listening on 127.0.0.1:5432, see http://localhost:8080/x@y at 12:30:00": "listening on 127.0.0.1:5432, see http://localhost:8080/x@y at 12:30:00",
		"": "",
	} {
		if got := set.Text(in); got != want {
			t.Errorf("Text(%q) =\n\t%q, want\n\t%q", in, got, want)
		}
	}
	var nilSet *Set
	if got := nilSet.Text("amqp://u:pw@h/"); got != "amqp://u:***@h/" {
		t.Errorf("a nil Set: %q", got)
	}
}

// URLSecrets knows every secret the runner hands out: user info
// passwords, query passwords, DSN passwords, NATS tokens, decoded.
func TestURLSecrets(t *testing.T) {
	got := URLSecrets("postgres://u:P%40ss@h/p", "postgres://u@h/c?password=q%2Fw", "nats://t0ken@h:4222", "host=h password='d s n'")
	for _, want := range []string{"P@ss", "q/w", "t0ken", "d s n"} {
		found := false
		for _, g := range got {
			found = found || g == want
		}
		if !found {
			t.Errorf("URLSecrets: no %q in %q", want, got)
		}
	}
}
