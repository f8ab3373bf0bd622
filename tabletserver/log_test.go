package tabletserver_test

import (
	"log/slog"
	"testing"

	"github.com/metaplane/metaplane/internal/testutil"
)

// testLogger routes the package's logs to t.Log (see testutil.Logger).
func testLogger(t testing.TB) *slog.Logger { return testutil.Logger(t) }
