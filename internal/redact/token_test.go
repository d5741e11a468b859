package redact

import (
	"strings"
	"testing"
)

// TestUserOnlyTokens (issue 41, M6): a token in a URL's user info, with no
// password, is hidden in every form the runner prints: a URL it was given
// (URL), free text a service or a hint wrote (Set.Text, with no secret
// known). A plain user name is not a secret and stays.
func TestUserOnlyTokens(t *testing.T) {
	const tok = "S3cr3tNatsTok"
	for _, tc := range []struct{ in, want string }{
		{"nats --server nats://" + tok + "@127.0.0.1:4222 stream info drill_x", "nats --server nats://***@127.0.0.1:4222 stream info drill_x"},
		{"connecting to tls://" + tok + "@h:4222, ws://" + tok + "@h:80 and WSS://" + tok + "@h:443", "connecting to tls://***@h:4222, ws://***@h:80 and WSS://***@h:443"},
		{"git clone https://ghp_abcdefghijklmnop1234@github.com/o/r", "git clone https://***@github.com/o/r"},
		{"remote https://glpat-abcdefgh12345678@gitlab.com/o/r", "remote https://***@gitlab.com/o/r"},
		// User names: not secrets.
		{"psql 'postgres://postgres@127.0.0.1:5432/drill_x'", "psql 'postgres://postgres@127.0.0.1:5432/drill_x'"},
		{"amqp://guest@h:5672/ and redis://default@h:6379 and https://alice@example.com", "amqp://guest@h:5672/ and redis://default@h:6379 and https://alice@example.com"},
	} {
		if got := (*Set)(nil).Text(tc.in); got != tc.want {
			t.Errorf("Set.Text(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"tls://" + tok + "@h:4222", "tls://***@h:4222"},
		{"WS://" + tok + "@h:80/", "WS://***@h:80/"},
		{"https://ghp_abcdefghijklmnop1234@github.com/o/r", "https://***@github.com/o/r"},
		{"postgres://postgres@127.0.0.1:5432/x", "postgres://postgres@127.0.0.1:5432/x"},
		{"amqp://guest@h:5672/", "amqp://guest@h:5672/"},
	} {
		if got := URL(tc.in); got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if s := URLSecrets("nats://" + tok + "@127.0.0.1:4222"); len(s) == 0 || !strings.Contains(NewSet(s...).Text("token="+tok), Mask) {
		t.Errorf("the token is not among the URL's secrets: %v", s)
	}
}
