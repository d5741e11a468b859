package judge

import (
	"testing"

	"github.com/outboxdrill/runner/internal/testservers"
)

// The servers a test here asks for are started once and removed at the
// end (testservers).
func TestMain(m *testing.M) { testservers.Main(m) }
