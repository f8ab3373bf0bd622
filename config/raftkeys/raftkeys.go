// Package raftkeys holds the rules of the coordinator.raft.* keys that both
// the configuration loader (config, which refuses a bad value at load,
// naming the key) and the Raft backend (which turns the keys into
// Dragonboat settings) need: the tick arithmetic and the voter syntax. It
// imports the standard library and settings only, so the backend does
// not link the loader (koanf) and the loader does not link Dragonboat.
package raftkeys

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/metaplane/metaplane/settings"
)

// The Raft tick: Dragonboat's RTTMillisecond. Every Raft timing is a whole
// number of ticks.
const (
	RTTMillisecond = 50
	Tick           = RTTMillisecond * time.Millisecond
)

// The keys ComputeTiming names in its problems.
const (
	KeyHeartbeat = "coordinator.raft.heartbeat.interval"
	KeyElection  = "coordinator.raft.election.timeout"
)

// Timing is how coordinator.raft.heartbeat.interval and
// coordinator.raft.election.timeout map onto Dragonboat's settings.
type Timing struct {
	// Tick is the Raft tick the timing is counted in (Tick unless
	// ComputeTimingTick was given another).
	Tick time.Duration
	// RTTMillisecond is the tick in milliseconds (Dragonboat's
	// NodeHostConfig.RTTMillisecond).
	RTTMillisecond uint64
	// ElectionRTT is Dragonboat's ElectionRTT: 2/5 of election.timeout in
	// ticks, rounded up, at most election.timeout / 2 / tick (see
	// ComputeTiming).
	ElectionRTT uint64
	// HeartbeatRTT is Dragonboat's HeartbeatRTT: heartbeat.interval / tick,
	// lowered to ElectionRTT/4 so that at least four heartbeats fit in the
	// shortest election timeout (and ElectionRTT > 2*HeartbeatRTT, as
	// Dragonboat requires), and at least 1.
	HeartbeatRTT uint64
	// Heartbeat is the effective heartbeat interval, HeartbeatRTT ticks.
	Heartbeat time.Duration
	// ElectionMin and ElectionMax bound the randomized election timeout:
	// a follower starts an election after [ElectionMin, ElectionMax) of
	// silence from the leader (ElectionRTT to 2*ElectionRTT ticks).
	ElectionMin, ElectionMax time.Duration
	// Note is non-empty when a configured value was not used as is (the
	// heartbeat lowered, a value rounded down to the tick), and says why.
	Note string
}

// Summary is one line giving the effective timing, for `config validate`
// and logs.
func (r Timing) Summary() string {
	return fmt.Sprintf("raft timing: tick %s; heartbeat every %s (HeartbeatRTT %d); election after %s to %s of silence (ElectionRTT %d)",
		settings.FormatDuration(r.Tick), settings.FormatDuration(r.Heartbeat), r.HeartbeatRTT,
		settings.FormatDuration(r.ElectionMin), settings.FormatDuration(r.ElectionMax), r.ElectionRTT)
}

// ComputeTiming maps the configured heartbeat interval and election timeout
// onto Dragonboat's tick-based settings (tick = Tick, 50ms):
//
//   - election bounds the whole failover, not only its detection: a
//     follower starts an election after a randomized [ElectionRTT,
//     2*ElectionRTT) ticks of silence, and ElectionRTT = ceil(2/5 *
//     election / tick), at most election / 2 / tick. With 1s: after 400ms to
//     800ms, leaving at least a fifth of the timeout for the pre-vote and
//     vote rounds, the new leader's leader record and the coordinator taking
//     over. (Dragonboat's window always spans [ElectionRTT, 2*ElectionRTT):
//     with ElectionRTT = election/2/tick detection alone would use the
//     whole timeout.)
//   - heartbeat is an upper bound on the heartbeat interval: HeartbeatRTT =
//     min(heartbeat / tick, ElectionRTT / 4), at least 1, so that the
//     shortest election timeout spans four heartbeats (Dragonboat itself
//     requires ElectionRTT > 2*HeartbeatRTT).
//
// With the defaults (500ms, 1s): elections after 400ms to 800ms of silence,
// the heartbeat lowered to 100ms (noted in the result). It is a pure
// function.
//
// Errors: a *settings.Error naming the key at fault when the pair cannot be
// honoured: heartbeat below one tick, election below 300ms (ElectionRTT
// below 3), or heartbeat not below election.
func ComputeTiming(heartbeat, election time.Duration) (Timing, error) {
	return ComputeTimingTick(heartbeat, election, Tick)
}

// ComputeTimingTick is ComputeTiming with another tick than Tick, a whole
// number of milliseconds of at least 1ms (the Raft backend's benchmarks
// compare ticks with it; the configuration has no key for the tick).
func ComputeTimingTick(heartbeat, election, tick time.Duration) (Timing, error) {
	if tick < time.Millisecond || tick%time.Millisecond != 0 {
		return Timing{}, fmt.Errorf("raft tick %s: want a whole number of milliseconds, at least 1ms", tick)
	}
	var probs settings.Problems
	if heartbeat < tick {
		probs.Add(KeyHeartbeat, fmt.Sprintf("%s is below the Raft tick of %s", settings.FormatDuration(heartbeat), settings.FormatDuration(tick)))
	}
	if election < 6*tick {
		probs.Add(KeyElection, fmt.Sprintf("%s is below the minimum of %s (the election timeout must span at least 6 Raft ticks of %s, so that ElectionRTT is at least 3 and exceeds twice a heartbeat of one tick)",
			settings.FormatDuration(election), settings.FormatDuration(6*tick), settings.FormatDuration(tick)))
	}
	if heartbeat >= tick && election >= 6*tick && heartbeat >= election {
		probs.Add(KeyHeartbeat, fmt.Sprintf("%s is not below %s (%s): a leader must heartbeat more often than followers time out",
			settings.FormatDuration(heartbeat), KeyElection, settings.FormatDuration(election)))
	}
	if err := probs.Err(); err != nil {
		return Timing{}, err
	}
	r := Timing{Tick: tick, RTTMillisecond: uint64(tick / time.Millisecond)}
	r.ElectionRTT = min(uint64((2*election+5*tick-1)/(5*tick)), uint64(election/2/tick))
	hb := uint64(heartbeat / tick)
	r.HeartbeatRTT = min(hb, r.ElectionRTT/4)
	if r.HeartbeatRTT < 1 {
		r.HeartbeatRTT = 1
	}
	r.Heartbeat = time.Duration(r.HeartbeatRTT) * tick
	r.ElectionMin = time.Duration(r.ElectionRTT) * tick
	r.ElectionMax = 2 * r.ElectionMin

	var notes []string
	switch {
	case r.HeartbeatRTT < hb:
		notes = append(notes, fmt.Sprintf("%s %s lowered to %s, so that four heartbeats fit in the shortest election timeout (ElectionRTT %d)",
			KeyHeartbeat, settings.FormatDuration(heartbeat), settings.FormatDuration(r.Heartbeat), r.ElectionRTT))
	case r.Heartbeat != heartbeat:
		notes = append(notes, fmt.Sprintf("%s %s rounded down to %s (a whole number of ticks of %s)",
			KeyHeartbeat, settings.FormatDuration(heartbeat), settings.FormatDuration(r.Heartbeat), settings.FormatDuration(tick)))
	}
	r.Note = strings.Join(notes, "; ")
	return r, nil
}

// Voter is one entry of coordinator.raft.voters.
type Voter struct {
	// ID is the voter's Raft replica id, positive.
	ID uint64
	// Host and Port are the voter's Raft address.
	Host string
	Port int
}

// Address returns host:port (IPv6 hosts bracketed).
func (v Voter) Address() string { return net.JoinHostPort(v.Host, strconv.Itoa(v.Port)) }

// String returns id@host:port.
func (v Voter) String() string { return strconv.FormatUint(v.ID, 10) + "@" + v.Address() }

// ParseVoter parses one voter entry, id@host:port. Errors say what is
// wrong with s.
func ParseVoter(s string) (Voter, error) {
	idPart, addr, ok := strings.Cut(strings.TrimSpace(s), "@")
	if !ok {
		return Voter{}, fmt.Errorf("entry %q: want id@host:port (e.g. 1@coord-1:9124)", s)
	}
	id, err := strconv.ParseUint(idPart, 10, 64)
	if err != nil || id == 0 {
		return Voter{}, fmt.Errorf("entry %q: id %q is not a positive integer", s, idPart)
	}
	host, port, err := settings.ParseHostPort(addr, false)
	if err != nil {
		return Voter{}, fmt.Errorf("entry %q: %v", s, err)
	}
	return Voter{ID: id, Host: host, Port: port}, nil
}
