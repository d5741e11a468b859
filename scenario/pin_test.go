package scenario

import (
	"slices"
	"strings"
	"testing"
)

func TestBrokerPinAndNotJudged(t *testing.T) {
	sc := parseOK(t, "name: p\nbroker: kafka\nnot_judged: [double_published]\nsteps:\n  - produce(event=e1)\n")
	if sc.Pinned != "kafka" || sc.PinnedPos.Line != 2 || !slices.Equal(sc.NotJudged, []string{"double_published"}) {
		t.Fatalf("pinned %q at %v, not judged %v", sc.Pinned, sc.PinnedPos, sc.NotJudged)
	}
	if sc.PinnedSkip("kafka") != "" || !strings.Contains(sc.PinnedSkip("redis"), "t.yaml:2:9: pinned to kafka") {
		t.Errorf("PinnedSkip: kafka %q, redis %q", sc.PinnedSkip("kafka"), sc.PinnedSkip("redis"))
	}
	if parseOK(t, "name: p\nsteps:\n  - produce(event=e1)\n").PinnedSkip("nats") != "" {
		t.Error("a scenario without broker: is skipped nowhere")
	}
	for src, want := range map[string]string{
		"broker: kafak":                                 `t.yaml:2:9: broker: unknown broker "kafak" (did you mean "kafka"?)`,
		"not_judged: [double_publishd]":                 `t.yaml:2:14: not_judged: unknown invariant "double_publishd" (did you mean "double_published"?)`,
		"not_judged: lost":                              "t.yaml:2:13: not_judged: want a list of invariants",
		"not_judged: [lost, lost]":                      "t.yaml:2:20: not_judged: lost given twice",
		"not_judged: [lost]\nexpect_violations: [lost]": "t.yaml:2:13: not_judged: lost is also in expect_violations",
		"brokr: kafka":                                  `t.yaml:2:1: unknown key "brokr" (did you mean "broker"?)`,
	} {
		_, errs := Parse("t.yaml", []byte("name: p\n"+src+"\nsteps:\n  - produce(event=e1)\n"), testKinds)
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), want) {
			t.Errorf("%s: got %v, want %s", src, errs, want)
		}
	}
}
