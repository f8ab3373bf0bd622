package bench

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/plugins"
)

func TestSummarizeElections(t *testing.T) {
	kills := []ElectionKill{
		{CampaignMicros: 500e3, ServingMicros: 510e3, TotalMicros: 512e3, EpochStep: 1},
		{CampaignMicros: 900e3, ServingMicros: 905e3, TotalMicros: 906e3, EpochStep: 2},
		{CampaignMicros: 0, ServingMicros: 700e3, TotalMicros: 701e3, EpochStep: 1}, // a win before the kill: no campaign phase
	}
	d := summarizeElections(3, kills)
	if d.Voters != 3 || len(d.Kills) != 3 {
		t.Fatalf("detail %+v", d)
	}
	byName := map[string]ElectionPhase{}
	for _, p := range d.Phases {
		byName[p.Phase] = p
	}
	c, ok := byName["campaign returned"]
	if !ok || c.N != 2 || c.P50Micros != 500e3 || c.MaxMicros != 900e3 {
		t.Errorf("campaign phase %+v: want 2 samples (the zero left out), p50 500ms, max 900ms", c)
	}
	a, ok := byName["admin API answers"]
	if !ok || a.N != 3 || a.P50Micros != 701e3 || a.P90Micros != 906e3 || a.P99Micros != 906e3 {
		t.Errorf("total phase %+v", a)
	}
	if d.EpochSteps["1"] != 2 || d.EpochSteps["2"] != 1 || d.stepsText() != "1:2 2:1" {
		t.Errorf("epoch steps %v (%q)", d.EpochSteps, d.stepsText())
	}
}

func TestElectionTargets(t *testing.T) {
	row := func(id string, n int, p99 float64) Row {
		return Row{ID: id, Metric: MetricP50, Results: []Result{{Backend: Raft, N: n, P50Micros: 600e3, P90Micros: 800e3, P99Micros: p99, MaxMicros: p99}}}
	}
	for _, tt := range []struct {
		name   string
		rows   []Row
		three  string
		five   string
		detail string
	}{
		{"both met", []Row{row("election.sigkill", 50, 950e3), row("election.sigkill-5", 60, 900e3)}, TargetMet, TargetMet, "over 50 kills"},
		{"too few kills", []Row{row("election.sigkill", 9, 950e3), row("election.sigkill-5", 9, 1.2e6)}, TargetNotMeasured, TargetNotMet, "fewer than 50 kills"},
		{"five not run", []Row{row("election.sigkill", 50, 1.5e6)}, TargetNotMet, TargetNotMeasured, "not measured on Raft"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rep := &Report{Options: RunConfig{Voters: 3}, Rows: tt.rows}
			got := map[string]TargetResult{}
			for _, tr := range EvaluateTargets(rep) {
				got[tr.Target] = tr
			}
			var details []string
			for voters, want := range map[string]string{"3 voters": tt.three, "5 voters": tt.five} {
				found := false
				for name, tr := range got {
					if strings.HasPrefix(name, "leader election") && strings.Contains(name, voters) {
						found = true
						details = append(details, tr.Detail)
						if tr.Status != want {
							t.Errorf("%s: %q (%s), want %q", name, tr.Status, tr.Detail, want)
						}
					}
				}
				if !found {
					t.Errorf("no election target for %s", voters)
				}
			}
			if !strings.Contains(strings.Join(details, "; "), tt.detail) {
				t.Errorf("details %q, want one saying %q", details, tt.detail)
			}
		})
	}
}

// TestElectionRigRaft runs the election rig on three real Raft voters
// (plugin processes) with the default timing: every kill elects a
// coordinator on another member, the phases come in their order, the
// epoch grows, and the killed member is back and campaigning before the
// next kill (the host never restarted it during the election).
func TestElectionRigRaft(t *testing.T) {
	bin := testutil.Binary(t, plugins.BinaryPrefix+Raft)
	env := &runEnv{opts: Options{BinDir: filepath.Dir(bin), WorkDir: t.TempDir()}}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ms, err := startRaftMembers(ctx, env, filepath.Join(env.opts.WorkDir, "raft"), 3, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.opts.MaxFailures != 1 {
			t.Fatalf("%s launched with restarts (MaxFailures %d)", m.label, m.opts.MaxFailures)
		}
	}
	r, err := newElectionRig(ctx, env, Raft, ms, core.ClientOptions{}, true, initialElectionBound)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for kill := 0; kill < 2; kill++ {
		before := r.leader()
		_, epoch := r.cands[before].won()
		pid := r.cands[before].m.pid()
		k, err := r.KillLeaderAndWait(ctx)
		if err != nil {
			t.Fatalf("kill %d: %v", kill, err)
		}
		if k.Killed != r.cands[before].m.label || k.Winner == k.Killed {
			t.Errorf("kill %d: killed %s, won %s; want %s killed and another member winning", kill, k.Killed, k.Winner, r.cands[before].m.label)
		}
		if !(k.CampaignMicros > 0 && k.CampaignMicros <= k.ServingMicros && k.ServingMicros <= k.TotalMicros) {
			t.Errorf("kill %d: phases out of order: %+v", kill, k)
		}
		if k.EpochStep < 1 {
			t.Errorf("kill %d: epoch step %d after epoch %d, want the epoch to grow", kill, k.EpochStep, epoch)
		}
		if r.restoreErr != nil {
			t.Fatalf("kill %d: the killed member was not restored: %v", kill, r.restoreErr)
		}
		if np := r.cands[before].m.pid(); np == pid || np <= 0 {
			t.Errorf("kill %d: the killed member's process is %d (was %d), want a new one", kill, np, pid)
		}
		if opens, campaigning := r.cands[before].counts(); campaigning != opens || campaigning < 2 {
			t.Errorf("kill %d: the restored coordinator campaigns on client %d of %d, want its newest", kill, campaigning, opens)
		}
	}
}
