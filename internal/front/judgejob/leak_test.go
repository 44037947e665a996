package judgejob_test

import (
	"testing"

	"github.com/sluice-dev/sluice/internal/testkit/leakcheck"
)

// TestMain fails the package if its tests leave goroutines running.
func TestMain(m *testing.M) { leakcheck.Main(m) }
