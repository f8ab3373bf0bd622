package coordinator

import (
	"slices"
	"testing"

	"github.com/metaplane/metaplane/catalog"
)

func lv(alive []int32, shutting ...int32) liveness {
	l := liveness{alive: map[int32]bool{}, shuttingDown: map[int32]bool{}}
	for _, a := range alive {
		l.alive[a] = true
	}
	for _, s := range shutting {
		l.shuttingDown[s] = true
	}
	return l
}

func rec(leader int32, isr ...int32) catalog.LeaderAndIsr {
	return catalog.LeaderAndIsr{Leader: leader, LeaderEpoch: 5, ISR: isr, BucketEpoch: 9, StandbyReplicas: []int32{}}
}

func TestElectOnFailure(t *testing.T) {
	for _, tt := range []struct {
		name     string
		in       catalog.LeaderAndIsr
		replicas []int32
		lv       liveness
		ok       bool
		leader   int32
		isr      []int32
		le, be   int32
	}{
		{"leader dies: first live replica in the ISR", rec(1, 1, 2, 3), []int32{1, 3, 2}, lv([]int32{2, 3}), true, 3, []int32{2, 3}, 6, 10},
		{"follower dies: ISR shrinks, leader epoch stays", rec(1, 1, 2, 3), []int32{1, 2, 3}, lv([]int32{1, 3}), true, 1, []int32{1, 3}, 5, 10},
		{"nothing dead: no change", rec(1, 1, 2), []int32{1, 2}, lv([]int32{1, 2}), false, 1, []int32{1, 2}, 5, 9},
		{"a replica outside the ISR is not elected", rec(1, 1), []int32{1, 2}, lv([]int32{2}), true, catalog.NoLeader, []int32{1}, 6, 10},
		{"offline keeps its ISR; unchanged while it stays so", rec(catalog.NoLeader, 1, 2), []int32{1, 2}, lv(nil), false, catalog.NoLeader, []int32{1, 2}, 5, 9},
		{"offline: the first ISR member back leads", rec(catalog.NoLeader, 1, 2), []int32{1, 2}, lv([]int32{2}), true, 2, []int32{2}, 6, 10},
		{"a server shutting down leads only when nobody else can", rec(1, 1, 2, 3), []int32{1, 2, 3}, lv([]int32{2, 3}, 2), true, 3, []int32{2, 3}, 6, 10},
		{"shutting down, alone: it still leads", rec(1, 1, 2), []int32{1, 2}, lv([]int32{2}, 2), true, 2, []int32{2}, 6, 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, ok := electOnFailure(tt.in, tt.replicas, tt.lv)
			if ok != tt.ok || out.Leader != tt.leader || !slices.Equal(out.ISR, tt.isr) || (ok && (out.LeaderEpoch != tt.le || out.BucketEpoch != tt.be)) {
				t.Fatalf("got %+v ok=%v, want leader %d ISR %v epochs %d/%d ok=%v", out, ok, tt.leader, tt.isr, tt.le, tt.be, tt.ok)
			}
		})
	}
}

func TestElectOnShutdown(t *testing.T) {
	out, ok, moved, stays := electOnShutdown(rec(1, 1, 2, 3), []int32{1, 2, 3}, 1, lv([]int32{1, 2, 3}, 1))
	if !ok || !moved || stays || out.Leader != 2 || !slices.Equal(out.ISR, []int32{2, 3}) || out.LeaderEpoch != 6 {
		t.Fatalf("leader shutting down: %+v ok=%v moved=%v stays=%v", out, ok, moved, stays)
	}
	out, ok, moved, _ = electOnShutdown(rec(2, 1, 2, 3), []int32{1, 2, 3}, 1, lv([]int32{1, 2, 3}, 1))
	if !ok || moved || out.Leader != 2 || !slices.Equal(out.ISR, []int32{2, 3}) || out.LeaderEpoch != 5 || out.BucketEpoch != 10 {
		t.Fatalf("follower shutting down: %+v ok=%v moved=%v", out, ok, moved)
	}
	if _, ok, _, stays := electOnShutdown(rec(1, 1), []int32{1, 2}, 1, lv([]int32{1, 2}, 1)); ok || !stays {
		t.Fatalf("sole ISR member shutting down: ok=%v stays=%v, want it to keep leading", ok, stays)
	}
	if _, ok, moved, stays := electOnShutdown(rec(2, 2, 3), []int32{2, 3}, 1, lv([]int32{1, 2, 3}, 1)); ok || moved || stays {
		t.Fatal("a bucket the server does not replicate changed")
	}
}

func TestElectPreferredAndUnclean(t *testing.T) {
	out, ok, ne := electPreferred(rec(2, 1, 2), []int32{1, 2}, lv([]int32{1, 2}))
	if !ok || ne || out.Leader != 1 || out.LeaderEpoch != 6 {
		t.Fatalf("preferred: %+v ok=%v notEligible=%v", out, ok, ne)
	}
	if _, ok, ne := electPreferred(rec(2, 2), []int32{1, 2}, lv([]int32{1, 2})); ok || !ne {
		t.Fatal("preferred replica outside the ISR was elected")
	}
	if _, ok, ne := electPreferred(rec(1, 1, 2), []int32{1, 2}, lv([]int32{1, 2})); ok || ne {
		t.Fatal("a bucket led by its preferred replica changed")
	}
	out, ok, online := electUnclean(rec(catalog.NoLeader, 1), []int32{1, 2, 3}, lv([]int32{3}))
	if !ok || online || out.Leader != 3 || !slices.Equal(out.ISR, []int32{3}) {
		t.Fatalf("unclean: %+v ok=%v online=%v", out, ok, online)
	}
	if _, ok, online := electUnclean(rec(1, 1), []int32{1, 2}, lv([]int32{1, 2})); ok || !online {
		t.Fatal("unclean election changed an online bucket")
	}
}
