package coordinator_test

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/coordinator"
	"github.com/metaplane/metaplane/internal/harness"
	"github.com/metaplane/metaplane/internal/testutil"
)

// logLines is a JSON logger whose lines a test reads back.
type logLines struct{ buf testutil.SyncBuffer }

func (l *logLines) logger() *slog.Logger { return slog.New(slog.NewJSONHandler(&l.buf, nil)) }

// find returns the first line with msg whose attributes include want.
func (l *logLines) find(msg string, want map[string]any) map[string]any {
	for _, line := range strings.Split(l.buf.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["msg"] != msg {
			continue
		}
		ok := true
		for k, v := range want {
			ok = ok && m[k] == v
		}
		if ok {
			return m
		}
	}
	return nil
}

// TestStandbyLogsNewLeader: a standby logs the leader it learns of, with
// its id and address, and again when another takes over; the leader logs
// its resignation at shutdown.
func TestStandbyLogsNewLeader(t *testing.T) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	var aLogs, bLogs logLines
	a := harness.StartCoordinator(t, s, coordinator.Options{Logger: aLogs.logger()})
	testutil.WaitFor(t, 5*time.Second, "a leads", a.Srv.IsLeader)
	b := harness.StartCoordinator(t, s, coordinator.Options{Logger: bLogs.logger()})
	testutil.WaitFor(t, 5*time.Second, "b logs a as leader", func() bool {
		return bLogs.find("new leader", map[string]any{"leader": a.Srv.ID(), "leader_address": a.Srv.Address()}) != nil
	})
	a.Stop()
	testutil.WaitFor(t, 5*time.Second, "b leads", b.Srv.IsLeader)
	if bLogs.find("elected leader", nil) == nil {
		t.Errorf("b's logs lack its election:\n%s", bLogs.buf.String())
	}
	if aLogs.find("resigning leadership at shutdown", nil) == nil || aLogs.find("leadership resigned", nil) == nil {
		t.Errorf("a's logs lack its resignation:\n%s", aLogs.buf.String())
	}
}
