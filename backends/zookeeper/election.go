package zookeeper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/fanout"
)

// The FIP-9 election layout, under the root.
const (
	electionPath = "/coordinators/election"
	activePath   = "/coordinators/active"
)

// CoordinatorAddress is the JSON of /coordinators/active and of the
// election participants: version 2 {"version":2,"id":..,"listeners":..};
// version 1 (read only) had host and port instead of listeners.
type CoordinatorAddress struct {
	Version   int    `json:"version"`
	ID        string `json:"id"`
	Listeners string `json:"listeners,omitempty"`
	Host      string `json:"host,omitempty"`
	Port      int    `json:"port,omitempty"`
}

// EncodeCoordinatorAddress encodes id and listeners as CoordinatorAddress
// version 2, byte for byte as the original system writes it.
func EncodeCoordinatorAddress(id, listeners string) []byte {
	b, _ := json.Marshal(CoordinatorAddress{Version: 2, ID: id, Listeners: listeners})
	return b
}

// DecodeCoordinatorAddress decodes CoordinatorAddress version 1 or 2 into
// the id and the address (v2: the listeners; v1: host:port).
func DecodeCoordinatorAddress(data []byte) (id, address string, err error) {
	var a CoordinatorAddress
	if err := json.Unmarshal(data, &a); err != nil {
		return "", "", fmt.Errorf("coordinator address %q: %w", data, err)
	}
	switch a.Version {
	case 1:
		return a.ID, net.JoinHostPort(a.Host, strconv.Itoa(a.Port)), nil
	case 2:
		return a.ID, a.Listeners, nil
	}
	return "", "", fmt.Errorf("coordinator address %q: unknown version %d", data, a.Version)
}

// leadership is a won election: the epoch it wrote and the epoch node's
// zkVersion after the write (the fence token).
type leadership struct {
	b           *Backend
	cand        core.Candidate
	epoch       int64
	token       int64
	sessionID   int64
	participant string // znode path

	lost     chan struct{}
	lostOnce sync.Once
	mu       sync.Mutex
	why      string
	resigned bool
	done     chan struct{} // monitor exited
}

func (l *leadership) Epoch() int64 { return l.epoch }

func (l *leadership) Fence() core.Fence {
	return core.Fence{Epoch: l.epoch, Token: l.token, Valid: true}
}

func (l *leadership) Lost() <-chan struct{} { return l.lost }

// lose ends the leadership (once). It must not take b.mu.
func (l *leadership) lose(why string) {
	l.lostOnce.Do(func() {
		l.mu.Lock()
		l.why = why
		l.mu.Unlock()
		close(l.lost)
	})
}

// Resign ends the leadership and withdraws the candidacy: one multi that
// checks the epoch is still this leader's, deletes /coordinators/active
// and the participant; if the epoch moved on, the participant is deleted,
// and the active node only if this session still owns it. Lost is closed first. Idempotent. Errors: ErrUnavailable (the
// deletes could not be confirmed; the session's end removes them),
// context errors.
func (l *leadership) Resign(ctx context.Context) error {
	l.mu.Lock()
	if l.resigned {
		l.mu.Unlock()
		return nil
	}
	l.resigned = true
	l.mu.Unlock()
	l.lose("resigned")
	select {
	case <-l.done:
	case <-ctx.Done():
		return ctx.Err() // the monitor is still withdrawing on its own
	}
	return l.withdraw(ctx)
}

// withdraw deletes the leader's nodes if its session still holds them.
func (l *leadership) withdraw(ctx context.Context) error {
	b := l.b
	if b.isClosed() {
		return nil // closing the session removes them
	}
	if b.Session().ID != l.sessionID {
		return nil // the session expired: they are gone
	}
	ops := []any{
		&zk.CheckVersionRequest{Path: b.zpath(epochPath), Version: int32(l.token)},
		&zk.DeleteRequest{Path: b.zpath(activePath), Version: -1},
		&zk.DeleteRequest{Path: l.participant, Version: -1},
	}
	for len(ops) > 0 {
		var res []zk.MultiResponse
		err := b.do(ctx, func() error {
			var err error
			res, err = b.conn.Multi(ops...)
			return err
		})
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err() // res may still be written by the abandoned request
		}
		k := -1
		for i, r := range res {
			if r.Error != nil {
				k = i
				break
			}
		}
		if k < 0 {
			return b.closedErr(transportErr(err, "resign"))
		}
		switch {
		case len(ops) == 3 && k <= 1:
			// Superseded, or active already gone: the participant, and
			// the active node only if it is still this session's.
			ops = ops[2:]
			var ok bool
			var st *zk.Stat
			err := b.do(ctx, func() error {
				found, s, err := b.conn.Exists(b.zpath(activePath))
				if err == nil {
					ok, st = found, s
				}
				return err
			})
			if err != nil {
				return b.closedErr(mapErr(err, activePath, false))
			}
			if ok && st.EphemeralOwner == l.sessionID {
				ops = append(ops, &zk.DeleteRequest{Path: b.zpath(activePath), Version: st.Version})
			}
		case len(ops) == 2 && k == 1:
			ops = ops[:1] // the active node changed hands meanwhile
		case errors.Is(res[k].Error, zk.ErrNoNode):
			return nil
		default:
			return mapErr(res[k].Error, l.participant, false)
		}
	}
	return nil
}

// monitor ends the leadership when the epoch node changes (a newer leader
// bumped it), when the participant disappears, or when the session
// changes; then it unregisters, and (unless resigning) withdraws.
func (l *leadership) monitor() {
	b := l.b
	defer close(l.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-l.lost:
		case <-b.closeCh:
		}
		cancel()
	}()
	for ctx.Err() == nil {
		if b.Session().ID != l.sessionID {
			l.lose("session changed")
			break
		}
		var data []byte
		var st *zk.Stat
		var ech, pch, ach <-chan zk.Event
		err := b.do(ctx, func() error {
			var err error
			data, st, ech, err = b.conn.GetW(b.zpath(epochPath))
			return err
		})
		if errors.Is(err, zk.ErrNoNode) {
			l.lose("the epoch node was deleted")
			break
		}
		if err == nil && int64(st.Version) != l.token {
			l.lose(fmt.Sprintf("superseded: the epoch node is at %q, version %d", data, st.Version))
			break
		}
		if err == nil {
			var ok bool
			err = b.do(ctx, func() error {
				var err error
				ok, _, pch, err = b.conn.ExistsW(l.participant)
				return err
			})
			if err == nil && !ok {
				l.lose("the election participant was deleted")
				break
			}
		}
		if err == nil {
			// Fenced writes check the active node: without it (or with
			// someone else's) the leadership cannot write, so it ends.
			var ok bool
			var ast *zk.Stat
			err = b.do(ctx, func() error {
				found, s, ch, err := b.conn.ExistsW(b.zpath(activePath))
				if err == nil {
					ok, ast, ach = found, s, ch
				}
				return err
			})
			if err == nil && (!ok || ast.EphemeralOwner != l.sessionID) {
				l.lose("the active node was deleted or replaced")
				break
			}
		}
		if err != nil {
			// Connection trouble: the session's fate decides (see
			// handleSession); look again shortly.
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		select {
		case <-ech:
		case <-pch:
		case <-ach:
		case <-ctx.Done():
		}
	}
	b.mu.Lock()
	delete(b.leaderships, l)
	b.mu.Unlock()
	l.mu.Lock()
	resigning := l.resigned
	l.mu.Unlock()
	if !resigning {
		// Step aside so another candidate can win: while this session
		// lives, its participant would stay the lowest and block the
		// election. Retry until done, the session ends, or the client
		// closes.
		for !b.isClosed() && b.Session().ID == l.sessionID {
			wctx, wcancel := context.WithTimeout(context.Background(), b.timeout)
			err := l.withdraw(wctx)
			wcancel()
			if err == nil {
				break
			}
			wctx, wcancel = context.WithTimeout(context.Background(), b.timeout)
			_ = b.waitConnected(wctx)
			wcancel()
			select {
			case <-b.closeCh:
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

// seqOf returns a sequential node name's 10-digit suffix, or -1.
func seqOf(name string) int64 {
	if len(name) < 10 {
		return -1
	}
	n, err := strconv.ParseInt(name[len(name)-10:], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

func sortBySeq(names []string) {
	sort.SliceStable(names, func(i, j int) bool {
		a, b := seqOf(names[i]), seqOf(names[j])
		if (a < 0) != (b < 0) {
			return b < 0
		}
		if a != b {
			return a < b
		}
		return names[i] < names[j]
	})
}

var errRetryElection = errors.New("participant lost, campaign again")

// Campaign joins the FIP-9 election and blocks until c leads or ctx ends.
//
// The candidate creates an ephemeral-sequential participant under
// /coordinators/election holding CoordinatorAddress v2 JSON of its id and
// address. The lowest sequence number wins; every other candidate watches
// only its predecessor (no herd). The winner, in one multi, checks its
// participant still exists, bumps /coordinators/epoch (plain decimal,
// created as "-1", so the first leader gets 0; compare-and-set on its
// zkVersion), replaces any stale /coordinators/active and creates its own,
// ephemeral, with the same JSON. The Fence's Token is the epoch node's
// zkVersion after the bump. If the session expires while campaigning, the
// participant is created again in the new session.
//
// Errors: ErrInvalidArgument (empty candidate id), ErrUnavailable,
// ErrClosed, context errors. On every error the candidacy is withdrawn (in
// the background while disconnected): a participant left behind would be
// the lowest and block every election while its session lives.
func (b *Backend) Campaign(ctx context.Context, c core.Candidate) (core.Leadership, error) {
	if b.isClosed() {
		return nil, core.ErrClosed
	}
	if c.ID == "" {
		return nil, fmt.Errorf("%w: candidate id is empty", core.ErrInvalidArgument)
	}
	b.mu.Lock()
	b.campaigning++
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.campaigning--
		b.mu.Unlock()
	}()
	data := EncodeCoordinatorAddress(c.ID, c.Address)
	var guid [12]byte
	rand.Read(guid[:])
	prefix := "_c_" + hex.EncodeToString(guid[:]) + "-latch-"
	edir := b.zpath(electionPath)
	if err := b.ensurePath(ctx, edir); err != nil {
		return nil, b.closedErr(err)
	}
	me, mySession := "", int64(0)
	withdraw := func() {
		if me == "" || b.Session().ID != mySession {
			return
		}
		path, sid := edir+"/"+me, mySession
		wctx, cancel := context.WithTimeout(context.Background(), b.timeout)
		err := b.do(wctx, func() error { return b.conn.Delete(path, -1) })
		// A becomeLeader multi abandoned by ctx may have gone through:
		// its active node (ours) must not advertise a leader that is not.
		_ = b.do(wctx, func() error {
			if b.leadingIn(sid) {
				return nil // another campaign of this client leads: its node
			}
			ok, st, err := b.conn.Exists(b.zpath(activePath))
			if err != nil || !ok || st.EphemeralOwner != sid {
				return err
			}
			return b.conn.Delete(b.zpath(activePath), st.Version)
		})
		cancel()
		if err == nil || errors.Is(err, zk.ErrNoNode) {
			return
		}
		// Disconnected: keep trying in the background while the session
		// lives, or the participant would block the election.
		go b.deleteWhileSession(path, sid)
	}
	for {
		if err := ctx.Err(); err != nil {
			withdraw()
			return nil, err
		}
		if b.isClosed() {
			return nil, core.ErrClosed
		}
		if me == "" || b.Session().ID != mySession {
			if err := b.waitConnected(ctx); err != nil {
				withdraw()
				return nil, err
			}
			name, sid, err := b.createParticipant(ctx, edir, prefix, data)
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, b.closedErr(err)
			}
			me, mySession = name, sid
		}
		var names []string
		err := b.read(ctx, func() error {
			var err error
			names, _, err = b.conn.Children(edir)
			return err
		})
		if err != nil {
			if ctx.Err() != nil {
				continue
			}
			withdraw() // a participant left behind would block the election
			return nil, b.closedErr(mapErr(err, electionPath, false))
		}
		sortBySeq(names)
		idx := -1
		for i, n := range names {
			if n == me {
				idx = i
			}
		}
		if idx < 0 {
			me = "" // our participant is gone (expired): join again
			continue
		}
		if idx == 0 {
			l, err := b.becomeLeader(ctx, c, edir+"/"+me, mySession)
			if errors.Is(err, errRetryElection) {
				me = ""
				continue
			}
			if err != nil {
				if ctx.Err() != nil {
					continue // withdraws above
				}
				withdraw() // a participant left behind would block the election
				return nil, err
			}
			return l, nil
		}
		pred := edir + "/" + names[idx-1]
		var ok bool
		var ch <-chan zk.Event
		err = b.do(ctx, func() error {
			var err error
			ok, _, ch, err = b.conn.ExistsW(pred)
			return err
		})
		if err != nil || !ok {
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
		case <-b.closeCh:
		}
	}
}

// leadingIn reports whether a current leadership of this client belongs
// to session sid.
func (b *Backend) leadingIn(sid int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for l := range b.leaderships {
		select {
		case <-l.lost:
		default:
			if l.sessionID == sid {
				return true
			}
		}
	}
	return false
}

// deleteWhileSession deletes znode path, retrying until it is gone, the
// session sid ends (its ephemerals go with it) or the client closes.
func (b *Backend) deleteWhileSession(path string, sid int64) {
	for !b.isClosed() && b.Session().ID == sid {
		wctx, cancel := context.WithTimeout(context.Background(), b.timeout)
		err := b.do(wctx, func() error { return b.conn.Delete(path, -1) })
		if err == nil || errors.Is(err, zk.ErrNoNode) {
			cancel()
			return
		}
		_ = b.waitConnected(wctx)
		cancel()
		select {
		case <-b.closeCh:
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// createParticipant creates the ephemeral-sequential participant and
// returns its name. The create itself is not abandoned when ctx ends (its
// answer is needed to withdraw the node). Its name carries a random guid,
// so after a lost connection the outcome is found by listing the children;
// when that cannot be settled, a background cleanup deletes any node with
// the guid while the session lives, so no orphan blocks the election.
func (b *Backend) createParticipant(ctx context.Context, edir, prefix string, data []byte) (string, int64, error) {
	sid := b.Session().ID
	for attempt := 0; ; attempt++ {
		var name string
		err := b.do(context.Background(), func() error {
			n, err := b.conn.Create(edir+"/"+prefix, data, zk.FlagEphemeralSequential, b.acl)
			name = n
			return err
		})
		if err == nil {
			return name[strings.LastIndexByte(name, '/')+1:], sid, nil
		}
		if !retriable(err) {
			return "", 0, mapErr(err, electionPath, true)
		}
		unsettled := func(err error) (string, int64, error) {
			go b.cleanupParticipant(edir, prefix, sid)
			return "", 0, err
		}
		if attempt >= b.opts.MaxRetryAttempts+3 {
			return unsettled(mapErr(err, electionPath, true))
		}
		if err := b.waitConnected(ctx); err != nil {
			return unsettled(err)
		}
		if b.Session().ID != sid {
			sid = b.Session().ID // the old session's node is gone with it
			continue
		}
		var names []string
		if err := b.read(ctx, func() error {
			n, _, err := b.conn.Children(edir)
			if err == nil {
				names = n
			}
			return err
		}); err != nil {
			if ctx.Err() != nil {
				return unsettled(ctx.Err())
			}
			return unsettled(mapErr(err, electionPath, false))
		}
		for _, n := range names {
			if strings.HasPrefix(n, prefix) {
				return n, sid, nil
			}
		}
	}
}

// cleanupParticipant deletes the participants named with prefix, retrying
// until none is left, session sid ends or the client closes.
func (b *Backend) cleanupParticipant(edir, prefix string, sid int64) {
	for !b.isClosed() && b.Session().ID == sid {
		wctx, cancel := context.WithTimeout(context.Background(), b.timeout)
		var names []string
		err := b.do(wctx, func() error {
			n, _, err := b.conn.Children(edir)
			if err == nil {
				names = n
			}
			return err
		})
		if err == nil {
			left := false
			for _, n := range names {
				if strings.HasPrefix(n, prefix) {
					path := edir + "/" + n
					if err := b.do(wctx, func() error { return b.conn.Delete(path, -1) }); err != nil && !errors.Is(err, zk.ErrNoNode) {
						left = true
					}
				}
			}
			if !left {
				cancel()
				return
			}
		}
		_ = b.waitConnected(wctx)
		cancel()
		select {
		case <-b.closeCh:
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// becomeLeader bumps the epoch and registers /coordinators/active, in one
// multi conditional on the participant still existing.
func (b *Backend) becomeLeader(ctx context.Context, c core.Candidate, participant string, sid int64) (*leadership, error) {
	epochZ, activeZ := b.zpath(epochPath), b.zpath(activePath)
	addr := EncodeCoordinatorAddress(c.ID, c.Address)
	for attempt := 0; ; attempt++ {
		if attempt > 50 {
			return nil, fmt.Errorf("%w: could not bump %s after %d attempts", core.ErrUnavailable, epochPath, attempt)
		}
		if err := b.waitConnected(ctx); err != nil {
			return nil, err
		}
		if b.Session().ID != sid {
			return nil, errRetryElection
		}
		var edata []byte
		var est *zk.Stat
		err := b.read(ctx, func() error {
			var err error
			edata, est, err = b.conn.Get(epochZ)
			return err
		})
		if errors.Is(err, zk.ErrNoNode) {
			if err := b.ensurePath(ctx, b.zpath("/coordinators")); err != nil {
				return nil, err
			}
			err = b.do(ctx, func() error {
				_, err := b.conn.Create(epochZ, []byte("-1"), zk.FlagPersistent, b.acl)
				return err
			})
			if err != nil && !errors.Is(err, zk.ErrNodeExists) && !retriable(err) {
				return nil, mapErr(err, epochPath, true)
			}
			continue
		}
		if err != nil {
			return nil, b.closedErr(mapErr(err, epochPath, false))
		}
		epoch, perr := strconv.ParseInt(strings.TrimSpace(string(edata)), 10, 64)
		if perr != nil {
			return nil, fmt.Errorf("%w: %s holds %q, not a decimal epoch", core.ErrInvalidArgument, epochPath, edata)
		}
		var aok bool
		var ast *zk.Stat
		err = b.read(ctx, func() error {
			var err error
			aok, ast, err = b.conn.Exists(activeZ)
			return err
		})
		if err != nil {
			return nil, b.closedErr(mapErr(err, activePath, false))
		}
		// An active node of our own session (an earlier attempt whose answer
		// was lost, or a leadership of ours that ended) is replaced like
		// any other: the epoch is bumped again, never reused.
		ops := []any{
			&zk.CheckVersionRequest{Path: participant, Version: -1},
			&zk.SetDataRequest{Path: epochZ, Data: []byte(strconv.FormatInt(epoch+1, 10)), Version: est.Version},
		}
		if aok {
			ops = append(ops, &zk.DeleteRequest{Path: activeZ, Version: ast.Version})
		}
		ops = append(ops, &zk.CreateRequest{Path: activeZ, Data: addr, Acl: b.acl, Flags: zk.FlagEphemeral})
		var res []zk.MultiResponse
		err = b.do(ctx, func() error {
			var err error
			res, err = b.conn.Multi(ops...)
			return err
		})
		if err == nil {
			return b.lead(c, participant, sid, epoch+1, int64(res[1].Stat.Version))
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if len(res) > 0 && res[0].Error != nil {
			return nil, errRetryElection // the participant is gone
		}
		// A concurrent change (or a lost answer): look again.
	}
}

// lead registers a new leadership and starts its monitor.
func (b *Backend) lead(c core.Candidate, participant string, sid, epoch, token int64) (*leadership, error) {
	l := &leadership{
		b: b, cand: c, epoch: epoch, token: token, sessionID: sid, participant: participant,
		lost: make(chan struct{}), done: make(chan struct{}),
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, core.ErrClosed
	}
	b.leaderships[l] = struct{}{}
	if b.sessionID != sid || b.state == core.SessionExpired {
		l.lose("session changed")
	}
	b.mu.Unlock()
	go l.monitor()
	return l, nil
}

// Leader reads /coordinators/active and /coordinators/epoch (after a
// sync). Zero-length active data (elected, not yet registered, as the
// original writes it) is completed from the lowest election participant.
// The epoch is the leader's own: an election bumps the epoch and creates
// the active node in one multi, so the epoch node's last change is the
// active node's creation; the two are read one after the other and read
// again (a few times) while they do not pair up, as when an election
// lands between the reads. An epoch changed apart from the active node
// (a leader elected by a coordinator that writes them separately, or an
// epoch bumped by a fence: that leader is superseded) is reported as read
// after the active node. Errors: ErrNotFound (no active node),
// ErrUnavailable (no readable epoch node beside an active node),
// ErrClosed, context errors.
func (b *Backend) Leader(ctx context.Context) (core.LeaderInfo, error) {
	var active, epoch core.GetResult
	for attempt := 0; ; attempt++ {
		res, err := b.GetMany(ctx, []string{activePath}, core.ReadOptions{})
		if err != nil {
			return core.LeaderInfo{}, err
		}
		if res[0].Err != nil {
			return core.LeaderInfo{}, fmt.Errorf("%w: no leader (%s)", core.ErrNotFound, activePath)
		}
		active = res[0]
		// The session's reads are served in order: this one sees at least
		// the multi that created the active node read above.
		res, err = b.GetMany(ctx, []string{epochPath}, core.ReadOptions{Stale: true})
		if err != nil {
			return core.LeaderInfo{}, err
		}
		epoch = res[0]
		if epoch.Err != nil || epoch.Node.Stat.ModifyRevision == active.Node.Stat.CreateRevision || attempt >= 3 {
			break
		}
	}
	if epoch.Err != nil {
		return core.LeaderInfo{}, fmt.Errorf("%w: %s exists but %s cannot be read: %v", core.ErrUnavailable, activePath, epochPath, epoch.Err)
	}
	e, perr := strconv.ParseInt(strings.TrimSpace(string(epoch.Node.Data)), 10, 64)
	if perr != nil || e < 0 {
		return core.LeaderInfo{}, fmt.Errorf("%w: %s exists but %s holds %q, not a leader's epoch", core.ErrUnavailable, activePath, epochPath, epoch.Node.Data)
	}
	li := core.LeaderInfo{Epoch: e}
	var err error
	data := active.Node.Data
	if len(data) == 0 {
		names, _, err := b.Children(ctx, electionPath, core.ReadOptions{Stale: true})
		if err == nil && len(names) > 0 {
			sortBySeq(names)
			if n, err := core.Get(ctx, b, electionPath+"/"+names[0]); err == nil {
				data = n.Data
			}
		}
	}
	if len(data) > 0 {
		li.ID, li.Address, err = DecodeCoordinatorAddress(data)
		if err != nil {
			return core.LeaderInfo{}, fmt.Errorf("%w: %s: %v", core.ErrUnavailable, activePath, err)
		}
	}
	return li, nil
}

// ObserveLeader delivers the current leader, if any, and then every new
// one (a change of id, address or epoch), from a watch on
// /coordinators/active re-armed as it fires. While there is no leader
// nothing is delivered. A slow consumer sees the latest leader. The
// channel is closed when ctx ends or the backend closes. Errors: ErrClosed.
func (b *Backend) ObserveLeader(ctx context.Context) (<-chan core.LeaderInfo, error) {
	if b.isClosed() {
		return nil, core.ErrClosed
	}
	// One subscriber, a buffer of one: the latest leader wins, and the
	// channel closes as soon as ctx ends.
	var hub fanout.Hub[core.LeaderInfo]
	out := hub.Subscribe(ctx, 1)
	go func() {
		defer hub.Close()
		var last core.LeaderInfo
		have := false
		azp := b.zpath(activePath)
		for ctx.Err() == nil && !b.isClosed() {
			var ok bool
			var ch <-chan zk.Event
			err := b.do(ctx, func() error {
				var err error
				ok, _, ch, err = b.conn.ExistsW(azp)
				return err
			})
			if err != nil {
				select {
				case <-ctx.Done():
				case <-b.closeCh:
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			if ok {
				li, err := b.Leader(ctx)
				if err == nil && (!have || li != last) && li.ID != "" {
					last, have = li, true
					hub.Publish(li)
				}
			}
			select {
			case <-ch:
			case <-ctx.Done():
			case <-b.closeCh:
			}
		}
	}()
	return out, nil
}
