package steps

import (
	"encoding/json"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/diag"
)

// A secret a scenario writes into a step (a start's env: a DSN's
// password=, a JSON "password", a URL's password, a variable whose name
// names a secret) never reaches the trace, JUnit, Markdown (Call.String)
// or the JSON report (ParamValues).
func TestStepParamsHideSecrets(t *testing.T) {
	src := `{service: relay, env: {DSN: "host=h user=bob password=Hunter2xyz dbname=x", X: "{\"password\": \"JsonSecret9\"}", U: "postgres://bob:UrlSecret7@h/db", API_TOKEN: TokenSecret5, PLAIN: visible}}`
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	var errs diag.Errors
	d, _ := Lookup("start")
	args := diag.Pairs("t.yaml", doc.Content[0], &errs)
	params, perrs := d.DecodeParams(args, diag.Pos{File: "t.yaml", Line: 1, Col: 1})
	if len(errs)+len(perrs) > 0 {
		t.Fatal(errs, perrs)
	}
	c := &Call{Def: d, Args: args, Params: params}
	js, err := json.Marshal(c.ParamValues())
	if err != nil {
		t.Fatal(err)
	}
	for where, text := range map[string]string{"trace": c.String(), "json": string(js)} {
		for _, secret := range []string{"Hunter2xyz", "JsonSecret9", "UrlSecret7", "TokenSecret5"} {
			if strings.Contains(text, secret) {
				t.Errorf("%s shows %s: %s", where, secret, text)
			}
		}
		if !strings.Contains(text, "visible") || !strings.Contains(text, "user=bob") {
			t.Errorf("%s hides more than the secrets: %s", where, text)
		}
	}
}
