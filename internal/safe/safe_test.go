package safe

import (
	"strings"
	"testing"
)

func TestLine(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain name", "plain name"},
		{"a\x1b[2Jb", `a\x1b[2Jb`},
		{"x\r\nFAKE: ok", `x\r\nFAKE: ok`},
		{"nul\x00tab\t", `nul\x00tab\t`},
		{"c1\u0085 del\x7f", `c1\u0085 del\x7f`},
		{"bidi\u202e", `bidi\u202e`},
		{"bad\xffutf8", `bad\xffutf8`},
		{"héllo ✅", "héllo ✅"},
	} {
		if got := Line(tc.in); got != tc.want {
			t.Errorf("Line(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestText(t *testing.T) {
	if got, want := Text("want 1\n got\t2\x1b[2J\r"), "want 1\n got\t2\\x1b[2J\\r"; got != want {
		t.Errorf("Text = %q, want %q", got, want)
	}
}

func TestCut(t *testing.T) {
	long := strings.Repeat("é", 1_000_000) // 2,000,000 bytes
	got := Line(long)
	if !strings.HasSuffix(got, "…(2,000,000 bytes)") || len(got) > Max+30 || !strings.HasPrefix(got, "éé") {
		t.Errorf("Line(2 MB) = %q", got)
	}
	if got := Cut(strings.Repeat("x", Max)); len(got) != Max {
		t.Errorf("a value of Max bytes was cut: %q", got)
	}
	v := Value(map[string]any{"event": strings.Repeat("x", 5000), "n": 1, "l": []any{strings.Repeat("y", 5000)}}).(map[string]any)
	if len(v["event"].(string)) > Max+30 || len(v["l"].([]any)[0].(string)) > Max+30 || v["n"] != 1 {
		t.Errorf("Value: %v", v)
	}
	if got := thousands(1234567); got != "1,234,567" {
		t.Errorf("thousands = %s", got)
	}
}

func TestLongLineCutsLongWords(t *testing.T) {
	id := strings.Repeat("x", 2500)
	got := LongLine("committed " + id + ": 100 USD alice → bob")
	if want := "committed " + strings.Repeat("x", Max) + "…(2,501 bytes) 100 USD alice → bob"; got != want {
		t.Errorf("LongLine = %q", got)
	}
	if got := Text("want " + id + "\n got 1"); got != "want "+strings.Repeat("x", Max)+"…(2,500 bytes)\n got 1" {
		t.Errorf("Text = %q", got)
	}
}

func TestLongLineLeavesCutValues(t *testing.T) {
	line := "produce(event=" + Cut(strings.Repeat("x", 2500)) + ", amount=100) → committed=1 " + strings.Repeat(" ", 300)
	if got := LongLine(line); got != line {
		t.Errorf("LongLine cut a value again: %q", got)
	}
}
