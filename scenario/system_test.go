package scenario

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/system"
)

// A service's placeholders (${stream}, ${consumer}, a proxy's URL) are
// filled when the service starts; a misspelt one is still an error.
func TestServicePlaceholdersWaitForTheStart(t *testing.T) {
	scs, errs := Parse("t.yaml", []byte(`name: n
steps:
  - start: {service: relay, env: {S: "${stream}", U: "${producer_db.url}"}}
`), testKinds)
	if len(errs) > 0 || len(scs) != 1 {
		t.Fatalf("errors %v", errs)
	}
	if got := scs[0].Steps[0].ParamValues()["env"].(map[string]string)["S"]; got != "${stream}" {
		t.Errorf("env S = %q; want ${stream} left for the start", got)
	}
	_, errs = Parse("t.yaml", []byte(`name: n
steps:
  - start: {service: relay, env: {S: "${strem}"}}
`), testKinds)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), `undefined variable "strem" (did you mean "stream"?)`) {
		t.Errorf("a misspelt placeholder: %v", errs)
	}
}

// The system file's ${…} are checked against what each start gives: the
// placeholders, the scenario's vars and the start's env. A misspelt one is
// reported where the system file writes it; on a broker where a
// placeholder names nothing, it says which broker.
func TestSystemFilePlaceholdersChecked(t *testing.T) {
	dir := t.TempDir()
	sys := filepath.Join(dir, "sys.yaml")
	write := func(env string) {
		src := "services:\n  consumer: {run: [node, c.js], env: {" + env + "}}\n" +
			"produce: \"SELECT ${event}\"\noutbox: {table: o, event_id: e, payload: p, unpublished: \"true\"}\n" +
			"stream: {event_id: e, payload: p}\ninbox: {table: i, consumer: c, event_id: e, payload: p}\n"
		if err := os.WriteFile(sys, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	parse := func(extra string) ([]*Scenario, string) {
		t.Helper()
		f := filepath.Join(dir, "s.yaml")
		src := "name: n\nsystem: sys.yaml\n" + extra + "steps:\n  - start: {service: consumer, env: {OWN: x}}\n"
		if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		scs, errs := LoadFiles([]string{f}, testKinds)
		return scs, errs.Error()
	}
	write(`T: "${topik}"`)
	if _, errs := parse(""); !strings.Contains(errs, `sys.yaml:2:42: services: consumer: env T: unknown ${topik} (did you mean "topic"?)`) {
		t.Errorf("a misspelt placeholder: %s", errs)
	}
	write(`T: "${mine}", O: "${OWN}", G: "${group}"`)
	if _, errs := parse("vars: {mine: 1}\n"); errs != "" {
		t.Errorf("a var, a start's env and a placeholder: %s", errs)
	}
	scs, errs := parse("vars: {mine: 1}\n")
	if errs != "" {
		t.Fatal(errs)
	}
	if got := scs[0].CheckPlaceholders([]string{"rabbitmq"}).Error(); !strings.Contains(got, "sys.yaml:2:69: services: consumer: env G: ${group} means nothing on rabbitmq, only on redis, kafka and nats") {
		t.Errorf("on rabbitmq: %s", got)
	}
	if got := scs[0].CheckPlaceholders([]string{"kafka"}); len(got) != 0 {
		t.Errorf("on kafka: %v", got)
	}
}

// --system applies to every scenario, over its own system: key, which the
// scenario then remembers (the run says so).
func TestGivenSystemOverridesTheKey(t *testing.T) {
	given := &system.System{File: "given.yaml"}
	own := &Scenario{System: &system.System{File: "own.yaml"}}
	none := &Scenario{}
	for _, sc := range []*Scenario{own, none} {
		if errs := sc.UseSystem(given); len(errs) > 0 {
			t.Fatal(errs)
		}
		if sc.System != given {
			t.Errorf("after UseSystem(--system): drills %s, want given.yaml", sc.System.File)
		}
	}
	if own.SystemOverridden != "own.yaml" || none.SystemOverridden != "" {
		t.Errorf("overridden: %q and %q, want own.yaml and none", own.SystemOverridden, none.SystemOverridden)
	}
}

// A broker fault written for another broker than the system's (XACK, a
// Redis command, on a RabbitMQ-only system) is a load error naming each
// broker's reason: it would only ever be skipped, nothing drilled.
func TestABrokerFaultForAnotherBrokerIsAnError(t *testing.T) {
	src := "name: f\nsteps:\n  - start: {service: consumer, fault: {on: \"broker.request(XACK)\", do: kill}}\n"
	for brokers, want := range map[string]string{
		"rabbitmq":       `t.yaml:3:44: broker.request(XACK) applies on none of the brokers s.yaml speaks (brokers: rabbitmq): rabbitmq: unknown operation "XACK"`,
		"redis":          "",
		"rabbitmq,redis": "",
	} {
		scs, errs := Parse("t.yaml", []byte(src), testKinds)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		sys := &system.System{File: "s.yaml", Brokers: strings.Split(brokers, ","), Services: map[string]*system.Service{"consumer": {}}}
		errs = scs[0].UseSystem(sys)
		switch {
		case want == "" && len(errs) > 0:
			t.Errorf("brokers %s: %v, want none", brokers, errs)
		case want != "" && (len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), want)):
			t.Errorf("brokers %s:\n got %v\nwant %s…", brokers, errs, want)
		}
	}
}
