package config

import (
	"strings"
	"testing"
	"time"
)

func TestRaftTiming(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name              string
		heartbeat, elec   time.Duration
		electionRTT, hbRT uint64
		effHeartbeat      time.Duration
		min, max          time.Duration
		note              string // fragment; "" = no note
	}{
		{"seeds' defaults: heartbeat lowered", 500 * ms, time.Second, 8, 2, 100 * ms, 400 * ms, 800 * ms, "lowered to 100ms"},
		{"honoured as given", 100 * ms, time.Second, 8, 2, 100 * ms, 400 * ms, 800 * ms, ""},
		{"smallest election", 50 * ms, 300 * ms, 3, 1, 50 * ms, 150 * ms, 300 * ms, ""},
		{"heartbeat rounded down", 120 * ms, 2 * time.Second, 16, 2, 100 * ms, 800 * ms, 1600 * ms, "rounded down to 100ms"},
		{"election rounded up to a tick, within the timeout", 100 * ms, 1050 * ms, 9, 2, 100 * ms, 450 * ms, 900 * ms, ""},
		{"election capped at half the timeout", 50 * ms, 390 * ms, 3, 1, 50 * ms, 150 * ms, 300 * ms, ""},
		{"both lowered at 300ms", 250 * ms, 300 * ms, 3, 1, 50 * ms, 150 * ms, 300 * ms, "lowered to 50ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := RaftTiming(tt.heartbeat, tt.elec)
			if err != nil {
				t.Fatal(err)
			}
			if r.RTTMillisecond != 50 || r.ElectionRTT != tt.electionRTT || r.HeartbeatRTT != tt.hbRT {
				t.Errorf("got RTT %d, ElectionRTT %d, HeartbeatRTT %d; want 50, %d, %d", r.RTTMillisecond, r.ElectionRTT, r.HeartbeatRTT, tt.electionRTT, tt.hbRT)
			}
			if r.ElectionRTT <= 2*r.HeartbeatRTT {
				t.Errorf("ElectionRTT %d not above 2*HeartbeatRTT %d: Dragonboat would refuse it", r.ElectionRTT, r.HeartbeatRTT)
			}
			if r.ElectionMax > tt.elec {
				t.Errorf("election window ends at %v, after the configured %v", r.ElectionMax, tt.elec)
			}
			if r.Heartbeat != tt.effHeartbeat || r.ElectionMin != tt.min || r.ElectionMax != tt.max {
				t.Errorf("got heartbeat %v window [%v, %v); want %v [%v, %v)", r.Heartbeat, r.ElectionMin, r.ElectionMax, tt.effHeartbeat, tt.min, tt.max)
			}
			if (tt.note == "") != (r.Note == "") || !strings.Contains(r.Note, tt.note) {
				t.Errorf("note %q, want one containing %q", r.Note, tt.note)
			}
			if !strings.Contains(r.Summary(), "tick 50ms") {
				t.Errorf("summary %q", r.Summary())
			}
		})
	}
}

func TestRaftTimingRefusals(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name            string
		heartbeat, elec time.Duration
		keys            []string
	}{
		{"heartbeat below a tick", 40 * ms, time.Second, []string{KeyRaftHeartbeat}},
		{"election below 300ms", 50 * ms, 299 * ms, []string{KeyRaftElection}},
		{"heartbeat not below election", time.Second, time.Second, []string{KeyRaftHeartbeat}},
		{"both too small", 0, 0, []string{KeyRaftElection, KeyRaftHeartbeat}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := RaftTiming(tt.heartbeat, tt.elec)
			ps := problemsOf(t, err)
			if len(ps) != len(tt.keys) {
				t.Fatalf("got %v, want problems for %v", ps, tt.keys)
			}
			for i, p := range ps {
				if p.Key != tt.keys[i] {
					t.Errorf("problem %d key %q, want %q", i, p.Key, tt.keys[i])
				}
			}
		})
	}
}
