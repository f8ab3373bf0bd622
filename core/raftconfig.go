package core

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// The Raft tick: Dragonboat's RTTMillisecond. Every Raft timing is a whole
// number of ticks.
const (
	RaftRTTMillisecond = 50
	RaftTick           = RaftRTTMillisecond * time.Millisecond
)

// The keys RaftTiming names in its problems.
const (
	KeyRaftHeartbeat = "coordinator.raft.heartbeat.interval"
	KeyRaftElection  = "coordinator.raft.election.timeout"
)

// RaftTimingResult is how coordinator.raft.heartbeat.interval and
// coordinator.raft.election.timeout map onto Dragonboat's settings.
type RaftTimingResult struct {
	// RTTMillisecond is the tick in milliseconds (RaftRTTMillisecond).
	RTTMillisecond uint64
	// ElectionRTT is Dragonboat's ElectionRTT: election.timeout / 2 / tick.
	ElectionRTT uint64
	// HeartbeatRTT is Dragonboat's HeartbeatRTT: heartbeat.interval / tick,
	// lowered to (ElectionRTT-1)/2 so that ElectionRTT > 2*HeartbeatRTT,
	// and at least 1.
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
func (r RaftTimingResult) Summary() string {
	return fmt.Sprintf("raft timing: tick %s; heartbeat every %s (HeartbeatRTT %d); election after %s to %s of silence (ElectionRTT %d)",
		formatDuration(RaftTick), formatDuration(r.Heartbeat), r.HeartbeatRTT,
		formatDuration(r.ElectionMin), formatDuration(r.ElectionMax), r.ElectionRTT)
}

// RaftTiming maps the configured heartbeat interval and election timeout
// onto Dragonboat's tick-based settings (tick = RaftTick, 50ms):
//
//   - election is the upper bound of the randomized election timeout:
//     ElectionRTT = election / 2 / tick, so a follower starts an election
//     after [election/2, election) of silence;
//   - heartbeat is an upper bound on the heartbeat interval: HeartbeatRTT =
//     min(heartbeat / tick, (ElectionRTT-1) / 2), at least 1, because
//     Dragonboat requires ElectionRTT > 2*HeartbeatRTT.
//
// With the defaults (500ms, 1s) the election timeout is honoured and the
// heartbeat lowered to 200ms (noted in the result). It is a pure function.
//
// Errors: a *ConfigError naming the key at fault when the pair cannot be
// honoured: heartbeat below one tick, election below 300ms (ElectionRTT
// below 3), or heartbeat not below election.
func RaftTiming(heartbeat, election time.Duration) (RaftTimingResult, error) {
	var probs Problems
	if heartbeat < RaftTick {
		probs.Add(KeyRaftHeartbeat, fmt.Sprintf("%s is below the Raft tick of %s", formatDuration(heartbeat), formatDuration(RaftTick)))
	}
	if election < 6*RaftTick {
		probs.Add(KeyRaftElection, fmt.Sprintf("%s is below the minimum of %s (the election timeout must span at least 6 Raft ticks of %s, so that ElectionRTT = timeout/2/tick is at least 3 and exceeds twice a heartbeat of one tick)",
			formatDuration(election), formatDuration(6*RaftTick), formatDuration(RaftTick)))
	}
	if heartbeat >= RaftTick && election >= 6*RaftTick && heartbeat >= election {
		probs.Add(KeyRaftHeartbeat, fmt.Sprintf("%s is not below %s (%s): a leader must heartbeat more often than followers time out",
			formatDuration(heartbeat), KeyRaftElection, formatDuration(election)))
	}
	if err := probs.Err(); err != nil {
		return RaftTimingResult{}, err
	}
	r := RaftTimingResult{RTTMillisecond: RaftRTTMillisecond}
	r.ElectionRTT = uint64(election / 2 / RaftTick)
	hb := uint64(heartbeat / RaftTick)
	r.HeartbeatRTT = min(hb, (r.ElectionRTT-1)/2)
	if r.HeartbeatRTT < 1 {
		r.HeartbeatRTT = 1
	}
	r.Heartbeat = time.Duration(r.HeartbeatRTT) * RaftTick
	r.ElectionMin = time.Duration(r.ElectionRTT) * RaftTick
	r.ElectionMax = 2 * r.ElectionMin

	var notes []string
	if r.ElectionMax != election {
		notes = append(notes, fmt.Sprintf("%s %s rounded down to %s (a whole number of 2-tick steps of %s)",
			KeyRaftElection, formatDuration(election), formatDuration(r.ElectionMax), formatDuration(2*RaftTick)))
	}
	switch {
	case r.HeartbeatRTT < hb:
		notes = append(notes, fmt.Sprintf("%s %s lowered to %s, because Dragonboat requires ElectionRTT (%d) > 2*HeartbeatRTT",
			KeyRaftHeartbeat, formatDuration(heartbeat), formatDuration(r.Heartbeat), r.ElectionRTT))
	case r.Heartbeat != heartbeat:
		notes = append(notes, fmt.Sprintf("%s %s rounded down to %s (a whole number of ticks of %s)",
			KeyRaftHeartbeat, formatDuration(heartbeat), formatDuration(r.Heartbeat), formatDuration(RaftTick)))
	}
	r.Note = strings.Join(notes, "; ")
	return r, nil
}

// RaftVoter is one entry of coordinator.raft.voters.
type RaftVoter struct {
	// ID is the voter's Raft replica id, positive.
	ID uint64
	// Host and Port are the voter's Raft address.
	Host string
	Port int
}

// Address returns host:port (IPv6 hosts bracketed).
func (v RaftVoter) Address() string { return net.JoinHostPort(v.Host, strconv.Itoa(v.Port)) }

// String returns id@host:port.
func (v RaftVoter) String() string { return strconv.FormatUint(v.ID, 10) + "@" + v.Address() }

// ParseRaftVoter parses one voter entry, id@host:port. Errors say what is
// wrong with s.
func ParseRaftVoter(s string) (RaftVoter, error) {
	idPart, addr, ok := strings.Cut(strings.TrimSpace(s), "@")
	if !ok {
		return RaftVoter{}, fmt.Errorf("entry %q: want id@host:port (e.g. 1@coord-1:9124)", s)
	}
	id, err := strconv.ParseUint(idPart, 10, 64)
	if err != nil || id == 0 {
		return RaftVoter{}, fmt.Errorf("entry %q: id %q is not a positive integer", s, idPart)
	}
	host, port, err := parseHostPort(addr, false)
	if err != nil {
		return RaftVoter{}, fmt.Errorf("entry %q: %v", s, err)
	}
	return RaftVoter{ID: id, Host: host, Port: port}, nil
}

// parseHostPort parses host:port with a port in 1..65535 (0 too when
// allowZero).
func parseHostPort(s string, allowZero bool) (string, int, error) {
	host, portStr, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("address %q: want host:port", s)
	}
	if host == "" {
		return "", 0, fmt.Errorf("address %q: empty host", s)
	}
	if strings.ContainsAny(host, " /@,\t") {
		return "", 0, fmt.Errorf("address %q: invalid host %q", s, host)
	}
	port, err := strconv.Atoi(portStr)
	lo := 1
	if allowZero {
		lo = 0
	}
	if err != nil || port < lo || port > 65535 {
		return "", 0, fmt.Errorf("address %q: port %q is not in %d..65535", s, portStr, lo)
	}
	return host, port, nil
}

// RaftVoters returns the voter set: coordinator.raft.voters parsed, or,
// when it is empty, a single voter with id RaftNodeID() on
// 127.0.0.1:coordinator.raft.port (the embedded single-node quorum).
// Entries that do not parse are skipped (LoadConfig refuses them).
func (c *Config) RaftVoters() []RaftVoter {
	r := c.Coordinator.Raft
	if len(r.Voters) == 0 {
		return []RaftVoter{{ID: c.RaftNodeID(), Host: "127.0.0.1", Port: r.Port}}
	}
	out := make([]RaftVoter, 0, len(r.Voters))
	for _, s := range r.Voters {
		if v, err := ParseRaftVoter(s); err == nil {
			out = append(out, v)
		}
	}
	return out
}

// RaftNodeID returns this coordinator's voter id: coordinator.raft.node.id,
// or 1 when it is not set.
func (c *Config) RaftNodeID() uint64 {
	if c.Coordinator.Raft.NodeID == 0 {
		return 1
	}
	return c.Coordinator.Raft.NodeID
}

// RaftTiming returns the effective Raft timing of c (see the function
// RaftTiming).
func (c *Config) RaftTiming() (RaftTimingResult, error) {
	return RaftTiming(c.Coordinator.Raft.HeartbeatInterval, c.Coordinator.Raft.ElectionTimeout)
}
