package coordinator

import (
	"slices"

	"github.com/metaplane/metaplane/catalog"
)

// The bucket leader election rules, as the original's coordinator has
// them (ReplicaLeaderElection): pure functions of a bucket's record, its
// assigned replicas (in assignment order: the first is the preferred
// leader) and which tablet servers are alive. They decide; the controller
// (controller.go) reads, writes and notifies.

// liveness says which tablet servers may lead: alive (registered) and,
// for a new leadership, not shutting down.
type liveness struct {
	alive        map[int32]bool
	shuttingDown map[int32]bool
}

func (lv liveness) eligible(id int32) bool { return lv.alive[id] && !lv.shuttingDown[id] }

// firstEligible is the first replica, in assignment order, that is in isr
// (when isr is not nil) and passes ok; NoLeader when none does.
func firstEligible(replicas, isr []int32, ok func(int32) bool) int32 {
	for _, r := range replicas {
		if (isr == nil || slices.Contains(isr, r)) && ok(r) {
			return r
		}
	}
	return catalog.NoLeader
}

// withoutServers is isr without the members drop says to drop, in order
// (a new slice).
func withoutServers(isr []int32, drop func(int32) bool) []int32 {
	out := make([]int32, 0, len(isr))
	for _, r := range isr {
		if !drop(r) {
			out = append(out, r)
		}
	}
	return out
}

// withLeader is rec with leader as its leader and isr as its ISR, the
// epochs raised as the original raises them: a new leader (or none)
// raises the leader epoch; every change raises the bucket epoch.
func withLeader(rec catalog.LeaderAndIsr, leader int32, isr []int32) catalog.LeaderAndIsr {
	out := rec
	out.ISR = isr
	out.StandbyReplicas = slices.Clone(rec.StandbyReplicas)
	if leader != rec.Leader {
		out.Leader = leader
		out.LeaderEpoch++
	}
	out.BucketEpoch++
	return out
}

// sameRecord reports whether a and b lead and replicate alike (the
// epochs aside).
func sameRecord(a, b catalog.LeaderAndIsr) bool {
	return a.Leader == b.Leader && slices.Equal(a.ISR, b.ISR)
}

// electOnFailure is the record of a bucket once the tablet servers that
// are not alive are gone (the original's default election, on a server's
// failure): the dead leave the ISR; a leader that is dead (or none) is
// replaced by the first assigned replica that is alive and in the ISR
// left, preferring one that is not shutting down; with none, the bucket
// is offline (leader -1) and keeps its last ISR, so that the first of its
// members to come back leads it again. ok is false when nothing changes.
func electOnFailure(rec catalog.LeaderAndIsr, replicas []int32, lv liveness) (catalog.LeaderAndIsr, bool) {
	isr := withoutServers(rec.ISR, func(r int32) bool { return !lv.alive[r] })
	leader := rec.Leader
	if leader == catalog.NoLeader || !lv.alive[leader] || !slices.Contains(isr, leader) {
		leader = firstEligible(replicas, isr, lv.eligible)
		if leader == catalog.NoLeader {
			leader = firstEligible(replicas, isr, func(r int32) bool { return lv.alive[r] })
		}
	}
	if leader == catalog.NoLeader {
		// Offline: no live member of the ISR. Keep the ISR it had (the
		// replicas that hold every acknowledged record).
		isr = slices.Clone(rec.ISR)
	}
	out := withLeader(rec, leader, isr)
	return out, !sameRecord(out, rec)
}

// electOnShutdown is the record of a bucket once tablet server id, which
// is shutting down, no longer leads it nor is in its ISR (the original's
// ControlledShutdownLeaderElection): a leadership goes to the first
// assigned replica that is eligible and in the ISR. ok is false when
// nothing changes; moved reports a leadership that went; stays reports a
// leadership that could not (no other eligible member of the ISR: the
// record is left as it is).
func electOnShutdown(rec catalog.LeaderAndIsr, replicas []int32, id int32, lv liveness) (out catalog.LeaderAndIsr, ok, moved, stays bool) {
	if !slices.Contains(rec.ISR, id) && rec.Leader != id {
		return rec, false, false, false
	}
	isr := withoutServers(rec.ISR, func(r int32) bool { return r == id })
	leader := rec.Leader
	if leader == id {
		leader = firstEligible(replicas, isr, lv.eligible)
		if leader == catalog.NoLeader {
			return rec, false, false, true
		}
		moved = true
	} else if len(isr) == 0 {
		return rec, false, false, false
	}
	out = withLeader(rec, leader, isr)
	return out, !sameRecord(out, rec), moved, false
}

// electPreferred moves leadership to the first assigned replica when it
// is eligible and in the ISR. ok is false when nothing changes;
// eligibleNot reports a bucket whose preferred replica cannot lead now.
func electPreferred(rec catalog.LeaderAndIsr, replicas []int32, lv liveness) (out catalog.LeaderAndIsr, ok, notEligible bool) {
	if len(replicas) == 0 {
		return rec, false, true
	}
	p := replicas[0]
	if rec.Leader == p {
		return rec, false, false
	}
	if !lv.eligible(p) || !slices.Contains(rec.ISR, p) {
		return rec, false, true
	}
	return withLeader(rec, p, slices.Clone(rec.ISR)), true, false
}

// electUnclean gives an offline bucket the first assigned replica that is
// alive as its leader, in the ISR or not; its ISR becomes that replica
// alone. Whatever the old ISR held that it did not is lost: only an
// operator asks for it. ok is false when nothing changes (the bucket is
// not offline: online is true, or no replica is alive).
func electUnclean(rec catalog.LeaderAndIsr, replicas []int32, lv liveness) (out catalog.LeaderAndIsr, ok, online bool) {
	if rec.Leader != catalog.NoLeader && lv.alive[rec.Leader] {
		return rec, false, true
	}
	leader := firstEligible(replicas, nil, lv.eligible)
	if leader == catalog.NoLeader {
		return rec, false, false
	}
	return withLeader(rec, leader, []int32{leader}), true, false
}
