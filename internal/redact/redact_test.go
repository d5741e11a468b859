package redact

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
)

func TestURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://u:s3cr3t@127.0.0.1:5432/x", "postgres://u:***@127.0.0.1:5432/x"},
		{"postgresql://u:s3cr3t@h/x?sslmode=disable&application_name=a@b", "postgresql://u:***@h/x?sslmode=disable&application_name=a@b"},
		{"postgres://h:5432/x?application_name=a@b", "postgres://h:5432/x?application_name=a@b"},
		{"postgres://u@h/x?password=s3cr3t&sslmode=disable", "postgres://u@h/x?password=***&sslmode=disable"},
		{"postgres://u:s3:cr3t@h/x", "postgres://u:***@h/x"},
		{"postgres://u:s3@cr3t@h/x", "postgres://u:***@h/x"},
		{"postgres://u:s3%40cr3t@h/x", "postgres://u:***@h/x"},
		{"host=127.0.0.1 port=1 password=s3cr3t dbname=x", "host=127.0.0.1 port=1 password=*** dbname=x"},
		{"host=h password = 's3 cr\\'3t' user=u", "host=h password = *** user=u"},
		{"host=h sslpassword=s3cr3t", "host=h sslpassword=***"},
		{"redis://:s3cr3t@127.0.0.1:1", "redis://:***@127.0.0.1:1"},
		{"redis://u:s3cr3t@127.0.0.1:1/0", "redis://u:***@127.0.0.1:1/0"},
		{"rediss://u:s3cr3t@[bad", "rediss://u:***@[bad"},
		{"nats://u:s3cr3t@127.0.0.1:1", "nats://u:***@127.0.0.1:1"},
		{"nats://s3cr3t@127.0.0.1:1", "nats://***@127.0.0.1:1"},
		{"u:s3cr3t@127.0.0.1:1", "u:***@127.0.0.1:1"},
		{"h:1,u:s3cr3t@h:2,s3cr3t@h:3", "h:1,u:***@h:2,***@h:3"},
		{"127.0.0.1:9092,127.0.0.1:9093", "127.0.0.1:9092,127.0.0.1:9093"},
		{"amqp://u:s3cr3t@127.0.0.1:1/", "amqp://u:***@127.0.0.1:1/"},
		{"amqp://u:s3?cr#3t@h:1/", "amqp://u:***@h:1/"},
		{"amqp://u:s3/cr3t@h:1/", "amqp://u:***@h:1/"},
		{"redis://127.0.0.1:6379", "redis://127.0.0.1:6379"},
		{"", ""},
	} {
		if got := URL(tc.in); got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestErr: every client's parse and connect error about a URL holding a
// password, hidden.
func TestErr(t *testing.T) {
	for _, u := range []string{
		"postgres://u:s3cr3t@[bad", "postgres://u:s3cr3t@127.0.0.1:1/x?application_name=a@b",
		"host=127.0.0.1 port=1 password='s3cr3t", "redis://u:s3cr3t@[bad", "redis://:s3cr3t@127.0.0.1:1/x",
		"nats://u:s3cr3t@[bad", "amqp://u:s3cr3t@[bad", "amqp://u:s3%63r3t@h:x/", "%gg://u:s3cr3t@h",
		"redis://u:s3cr3t\"x@[bad", "postgres://u:s3cr3t\\x@[bad", "amqp://u:s3cr3t\x1b@[bad",
	} {
		var errs []error
		_, err := pgconn.ParseConfig(u)
		errs = append(errs, err)
		_, err = redis.ParseURL(u)
		errs = append(errs, err)
		_, err = url.Parse(u)
		errs = append(errs, err)
		_, err = amqp.ParseURI(u)
		errs = append(errs, err)
		for _, e := range errs {
			if e == nil {
				continue
			}
			got := fmt.Errorf("%s: %w", URL(u), Err(u, e)).Error()
			if strings.Contains(got, "s3cr3t") || strings.Contains(got, "s3%63r3t") {
				t.Errorf("%q: %s", u, got)
			}
			if !errors.Is(Err(u, e), e) {
				t.Errorf("%q: Err does not wrap %v", u, e)
			}
		}
	}
}

func TestErrNil(t *testing.T) {
	if Err("redis://:s3cr3t@h", nil) != nil {
		t.Fatal("Err of nil is not nil")
	}
}
