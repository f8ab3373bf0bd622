package raft

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/metaplane/metaplane/config"
	"github.com/metaplane/metaplane/core"
)

func TestOptionsFromSettings(t *testing.T) {
	o, err := OptionsFromSettings(map[string]string{
		"coordinator.raft.voters":                     "1@h1:9200,2@h2:9200,3@h3:9200",
		"coordinator.raft.node.id":                    "2",
		"coordinator.raft.port":                       "9200",
		"coordinator.raft.dir":                        "/var/lib/raft",
		"coordinator.raft.heartbeat.interval":         "100ms",
		"coordinator.raft.election.timeout":           "2s",
		"coordinator.raft.first-election.timeout":     "150ms",
		"coordinator.raft.catchup.timeout":            "10s",
		"coordinator.raft.log.segment-size":           "4mb",
		"coordinator.raft.snapshot.trigger.threshold": "500",
		"coordinator.raft.id-block-size":              "64",
		"coordinator.raft.change-log.retention":       "777",
		"coordinator.raft.logdb.profile":              "tiny",
		"coordinator.raft.join":                       "true",
		"coordinator.raft.disk.min-free":              "32mb",
		"coordinator.raft.cluster-id":                 "12345",
		"coordinator.tablet-server.session-timeout":   "9s",
		"coordinator.metadata-stream.max-wait":        "250ms",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Options{
		Voters: []Voter{{1, "h1:9200"}, {2, "h2:9200"}, {3, "h3:9200"}}, NodeID: 2, Port: 9200, Dir: "/var/lib/raft",
		Heartbeat: 100 * time.Millisecond, ElectionTimeout: 2 * time.Second, FirstElectionTimeout: 150 * time.Millisecond,
		CatchupTimeout: 10 * time.Second, SegmentSize: 4 << 20, SnapshotThreshold: 500, IDBlockSize: 64,
		ChangeLogRetention: 777, LogDBProfile: "tiny", Join: true, SessionTimeout: 9 * time.Second,
		MetadataStreamMaxWait: 250 * time.Millisecond, ProposalTimeout: 10 * time.Second, DiskMinFree: 32 << 20, ClusterID: 12345,
	}
	o.Logf = nil
	if got, w := fmtOptions(o), fmtOptions(want); got != w {
		t.Fatalf("options\n got %s\nwant %s", got, w)
	}
	hb, el, err := electionTicks(o.Heartbeat, o.ElectionTimeout, TickInterval)
	if err != nil || el != 16 || hb != 2 {
		t.Fatalf("ticks: heartbeat %d election %d %v; want 2 and 16", hb, el, err)
	}
	// The seeds' defaults: 1s election (ElectionRTT 8: elections after
	// 400ms to 800ms of silence), heartbeat lowered from 500ms to 100ms
	// (HeartbeatRTT 2).
	hb, el, err = electionTicks(500*time.Millisecond, time.Second, TickInterval)
	if err != nil || el != 8 || hb != 2 {
		t.Fatalf("default ticks: heartbeat %d election %d %v; want 2 and 8", hb, el, err)
	}
	// The same timeouts at the 10ms tick BenchmarkElectionTick compares
	// (Options.tick): the same window and heartbeat in milliseconds.
	hb, el, err = electionTicks(500*time.Millisecond, time.Second, 10*time.Millisecond)
	if err != nil || el != 40 || hb != 10 {
		t.Fatalf("default timeouts at a 10ms tick: heartbeat %d election %d %v; want 10 and 40", hb, el, err)
	}
	if _, _, err := electionTicks(500*time.Millisecond, time.Second, 1500*time.Microsecond); err == nil {
		t.Fatal("a tick of 1.5ms was accepted")
	}
}

func fmtOptions(o Options) string {
	o.Logf = nil
	return fmt.Sprintf("%+v", o)
}

func TestOptionsValidateNamesKeys(t *testing.T) {
	o := Options{Voters: []Voter{{1, "a:1"}, {1, "b"}}, NodeID: 7, Heartbeat: time.Second, ElectionTimeout: 200 * time.Millisecond,
		LogDBProfile: "huge", TLS: true}
	err := o.Validate()
	if err == nil {
		t.Fatal("bad options accepted")
	}
	for _, key := range []string{"coordinator.raft.dir", "coordinator.raft.voters", "coordinator.raft.node.id",
		"coordinator.raft.election.timeout", "coordinator.raft.logdb.profile", "coordinator.raft.tls.ca-file",
		"coordinator.raft.tls.cert-file", "coordinator.raft.tls.key-file"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("validation error does not name %s:\n%v", key, err)
		}
	}
}

// TestOptionsFromTheHostsDefaults: the settings the host sends with no
// configuration (its defaults, flattened) give the embedded single voter;
// values that do not parse are all refused, each naming its key.
func TestOptionsFromTheHostsDefaults(t *testing.T) {
	flat := config.Default().Flatten()
	flat["coordinator.raft.dir"] = t.TempDir()
	o, err := OptionsFromSettings(flat)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Voters) != 1 || o.Voters[0] != (Voter{1, "127.0.0.1:9124"}) || o.NodeID != 1 {
		t.Errorf("voters %v node %d, want the single voter 1@127.0.0.1:9124", o.Voters, o.NodeID)
	}
	if o.ElectionTimeout != time.Second || o.Heartbeat != 500*time.Millisecond || o.IDBlockSize != 1000 || o.SegmentSize != 8<<20 {
		t.Errorf("got election %v heartbeat %v id block %d segment %d; want the documented defaults", o.ElectionTimeout, o.Heartbeat, o.IDBlockSize, o.SegmentSize)
	}
	_, err = OptionsFromSettings(map[string]string{
		"coordinator.raft.election.timeout": "soon",
		"coordinator.raft.voters":           "1@h1:9124,two@h2:9124",
		"coordinator.raft.tls.enabled":      "maybe",
	})
	if !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("got %v, want ErrInvalidArgument", err)
	}
	for _, k := range []string{"coordinator.raft.election.timeout:", "coordinator.raft.voters:", "coordinator.raft.tls.enabled:"} {
		if !strings.Contains(err.Error(), k) {
			t.Errorf("error %q does not name %s", err, k)
		}
	}
}
