package main

import (
	"os"
	"os/exec"
	"testing"
)

// needNode skips t unless node and each of the Node example's modules are
// installed; in CI, which must install them (npm ci --prefix
// examples/node), it fails instead.
func needNode(t *testing.T, modules ...string) {
	t.Helper()
	for _, m := range modules {
		if _, err := exec.LookPath("node"); err != nil || !exists("../../examples/node/node_modules/"+m) {
			if os.Getenv("CI") != "" {
				t.Fatalf("CI must install the Node example (npm ci --prefix examples/node): node or %s is missing", m)
			}
			t.Skipf("node or examples/node/node_modules/%s missing: run npm ci --prefix examples/node", m)
		}
	}
}
