package zookeeper

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/go-zookeeper/zk"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/retry"
)

// epochPath is the leader epoch node (under the root); a fenced write's
// multi first checks it at the leader's zkVersion.
const epochPath = "/coordinators/epoch"

// zop is one op of the ZooKeeper multi a Txn becomes.
type zop struct {
	req    any // *zk.CreateRequest, *zk.SetDataRequest, *zk.DeleteRequest, *zk.CheckVersionRequest
	orig   int // index of the caller's op; -1 for the fence check
	parent bool
	path   string // contract path (for a created parent: the parent)
}

// Per-op overhead of a multi request beyond path and data bytes: the op
// header, length prefixes, version or flags, and a create's world ACL.
const (
	opOverhead   = 9 + 4 + 4 + 4 + 4 + 27
	multiOverhed = 4 + 8 + 9
)

// Txn runs ops as one ZooKeeper multi: all or nothing.
//
// With a valid opts.Fence the multi's first op checks /coordinators/epoch
// at the fence's Token (the epoch node's zkVersion the leader wrote) and
// its second that /coordinators/active exists; if either check fails the
// transaction fails with ErrFenced and nothing changes. The first check
// refuses a leader superseded by a newer one (every new leader bumps the
// epoch); the second a leader that resigned or whose session expired
// before anyone else was elected (its ephemeral active node is gone). A create with MakeParents gets the missing ancestors created,
// as empty persistent nodes, by ops inserted before it in the same multi
// (the ancestors are looked up first; if another client creates one in
// between, the multi is rebuilt and retried).
//
// A refused op gives a *core.TxnError with the caller's op index and
// sentinel: ErrNotFound, ErrNodeExists, ErrBadVersion, ErrNotEmpty,
// ErrNoParent (also for a child of an ephemeral node), ErrInvalidPath,
// ErrTooLarge, ErrInvalidArgument. If the connection is lost while the
// multi is in flight its outcome is unknown and Txn returns ErrUnavailable
// (writes are not retried), and so it does when the client closes under
// it. Other errors: ErrInvalidArgument (no ops), ErrFenced, ErrClosed
// (closed before the multi was sent: not applied), context errors (outcome
// unknown).
//
// OpResult.Stat of a set comes from the multi's answer; of a create it is
// read right after the multi and set back to the node's state at its
// creation (version 0, its data, no children); of a check it is read right
// after the multi (a later change, in the multi or by someone else, may
// show). TxnResult.Revision is the multi's zxid, exactly: the library
// answers no zxid, so the backend writes the multi itself on the library's
// connection (multiExact) and takes the reply's. (A zxid pieced together
// from stats, or the latest zxid the client had seen, could be a later
// write's: a created node read back after someone deleted it again, or
// another request's reply. An image merging its own writes with its watch
// by revision then let a stale state win over a newer one.)
func (b *Backend) Txn(ctx context.Context, ops []core.Op, opts core.TxnOptions) (core.TxnResult, error) {
	if b.isClosed() {
		return core.TxnResult{}, core.ErrClosed
	}
	if len(ops) == 0 {
		return core.TxnResult{}, fmt.Errorf("%w: empty transaction", core.ErrInvalidArgument)
	}
	if err := validateOps(ops); err != nil {
		return core.TxnResult{}, err
	}
	for attempt := 0; ; attempt++ {
		plan, err := b.plan(ctx, ops, opts.Fence)
		if err != nil {
			return core.TxnResult{}, err
		}
		if err := checkSize(plan); err != nil {
			return core.TxnResult{}, err
		}
		res, zxid, err := b.multiExact(ctx, plan)
		if err == nil {
			return b.results(ctx, ops, plan, res, zxid)
		}
		if ctx.Err() != nil {
			return core.TxnResult{}, err
		}
		if err == core.ErrClosed {
			// do's own refusal: closed before the multi was sent.
			return core.TxnResult{}, err
		}
		if errors.Is(err, errNotSentUnavailable) {
			return core.TxnResult{}, err
		}
		if b.isClosed() {
			// Closed while the multi may have been in flight.
			return core.TxnResult{}, transportErr(err, "transaction")
		}
		k := -1
		for i, r := range res {
			if r.Error != nil {
				k = i
				break
			}
		}
		if k < 0 || k >= len(plan) {
			return core.TxnResult{}, transportErr(err, "transaction")
		}
		z := plan[k]
		if z.orig < 0 {
			return core.TxnResult{}, fmt.Errorf("%w: the leadership of epoch %d (token %d) is no longer current: %s check failed (zookeeper: %v)",
				core.ErrFenced, opts.Fence.Epoch, opts.Fence.Token, z.path, res[k].Error)
		}
		if z.parent && errors.Is(res[k].Error, zk.ErrNodeExists) && attempt < 5 {
			continue // a parent appeared since we looked: rebuild
		}
		op := ops[z.orig]
		e := mapErr(res[k].Error, z.path, op.Type == core.OpCreate)
		if z.parent {
			e = fmt.Errorf("creating parent %s: %w", z.path, e)
		}
		return core.TxnResult{}, &core.TxnError{Index: z.orig, Err: e}
	}
}

// validateOps checks every op before anything is sent.
func validateOps(ops []core.Op) error {
	total := multiOverhed
	for i, op := range ops {
		bad := func(err error) error { return &core.TxnError{Index: i, Err: err} }
		if err := core.ValidatePath(op.Path); err != nil {
			return bad(err)
		}
		switch op.Type {
		case core.OpCheck, core.OpSet, core.OpDelete:
			if op.Version < core.AnyVersion || op.Version > math.MaxInt32 {
				return bad(fmt.Errorf("%w: %s %s: version %d out of range", core.ErrInvalidArgument, op.Type, op.Path, op.Version))
			}
			if op.Type == core.OpDelete && op.Path == "/" {
				return bad(fmt.Errorf("%w: the root cannot be deleted", core.ErrInvalidArgument))
			}
		case core.OpCreate:
			if !op.Mode.Valid() {
				return bad(fmt.Errorf("%w: create %s: unknown mode %v", core.ErrInvalidArgument, op.Path, op.Mode))
			}
			if op.Lease != 0 {
				return bad(fmt.Errorf("%w: create %s: the ZooKeeper backend has no leases (ephemerals belong to the client's session)", core.ErrInvalidArgument, op.Path))
			}
			if op.Path == "/" {
				if op.Mode.IsSequential() {
					return bad(fmt.Errorf("%w %q: a sequential create needs a name prefix below /", core.ErrInvalidPath, op.Path))
				}
				return bad(fmt.Errorf("%w: /", core.ErrNodeExists))
			}
		default:
			return bad(fmt.Errorf("%w: unknown op type %v", core.ErrInvalidArgument, op.Type))
		}
		if len(op.Data) > MaxValueSize {
			return bad(fmt.Errorf("%w: %s: %d bytes, the ZooKeeper backend's limit is %d", core.ErrTooLarge, op.Path, len(op.Data), MaxValueSize))
		}
		total += opOverhead + len(op.Path) + len(op.Data)
		if total > maxRequestSize {
			return bad(fmt.Errorf("%w: the transaction exceeds ZooKeeper's %d-byte request limit at op %d", core.ErrTooLarge, maxRequestSize, i))
		}
	}
	return nil
}

// checkSize refuses a multi whose request would exceed the server's
// packet limit (the server drops the connection instead of answering),
// naming the caller's op at which it crosses the limit.
func checkSize(plan []zop) error {
	total := multiOverhed
	for _, z := range plan {
		switch r := z.req.(type) {
		case *zk.CreateRequest:
			total += opOverhead + len(r.Path) + len(r.Data)
		case *zk.SetDataRequest:
			total += opOverhead + len(r.Path) + len(r.Data)
		case *zk.DeleteRequest:
			total += opOverhead + len(r.Path)
		case *zk.CheckVersionRequest:
			total += opOverhead + len(r.Path)
		}
		if total > maxRequestSize && z.orig >= 0 {
			return &core.TxnError{Index: z.orig, Err: fmt.Errorf("%w: the transaction exceeds ZooKeeper's %d-byte request limit at op %d (%s)",
				core.ErrTooLarge, maxRequestSize, z.orig, z.path)}
		}
	}
	return nil
}

// plan turns ops into a multi: the fence check first, then each op with
// any missing parents created just before it.
func (b *Backend) plan(ctx context.Context, ops []core.Op, fence core.Fence) ([]zop, error) {
	var plan []zop
	if fence.Valid {
		if fence.Token < 0 || fence.Token > math.MaxInt32 {
			return nil, fmt.Errorf("%w: fence token %d is not a zkVersion", core.ErrFenced, fence.Token)
		}
		plan = append(plan,
			zop{req: &zk.CheckVersionRequest{Path: b.zpath(epochPath), Version: int32(fence.Token)}, orig: -1, path: epochPath},
			zop{req: &zk.CheckVersionRequest{Path: b.zpath(activePath), Version: -1}, orig: -1, path: activePath})
	}
	// Which ancestors of MakeParents creates must be looked up.
	exists := map[string]bool{"/": true}
	var lookup []string
	for _, op := range ops {
		if op.Type != core.OpCreate || !op.MakeParents {
			continue
		}
		for p := core.ParentPath(op.Path); p != "/"; p = core.ParentPath(p) {
			if _, ok := exists[p]; !ok {
				exists[p] = false
				lookup = append(lookup, p)
			}
		}
	}
	if len(lookup) > 0 {
		found := make([]bool, len(lookup))
		err := parallel(len(lookup), func(i int) error {
			return b.read(ctx, func() error {
				ok, _, err := b.conn.Exists(b.zpath(lookup[i]))
				found[i] = ok
				return err
			})
		})
		if err != nil {
			return nil, b.closedErr(mapErr(err, "", false))
		}
		for i, p := range lookup {
			exists[p] = found[i]
		}
	}
	for i, op := range ops {
		zp := b.zpath(op.Path)
		switch op.Type {
		case core.OpCheck:
			plan = append(plan, zop{req: &zk.CheckVersionRequest{Path: zp, Version: int32(op.Version)}, orig: i, path: op.Path})
		case core.OpSet:
			plan = append(plan, zop{req: &zk.SetDataRequest{Path: zp, Data: op.Data, Version: int32(op.Version)}, orig: i, path: op.Path})
		case core.OpDelete:
			plan = append(plan, zop{req: &zk.DeleteRequest{Path: zp, Version: int32(op.Version)}, orig: i, path: op.Path})
			exists[op.Path] = false
		case core.OpCreate:
			if op.MakeParents {
				var missing []string
				for p := core.ParentPath(op.Path); p != "/"; p = core.ParentPath(p) {
					if !exists[p] {
						missing = append(missing, p)
					}
				}
				for j := len(missing) - 1; j >= 0; j-- {
					p := missing[j]
					plan = append(plan, zop{req: &zk.CreateRequest{Path: b.zpath(p), Acl: b.acl, Flags: zk.FlagPersistent}, orig: i, parent: true, path: p})
					exists[p] = true
				}
			}
			plan = append(plan, zop{req: &zk.CreateRequest{Path: zp, Data: op.Data, Acl: b.acl, Flags: int32(op.Mode)}, orig: i, path: op.Path})
			if !op.Mode.IsSequential() {
				exists[op.Path] = true
			}
		}
	}
	return plan, nil
}

// results builds the TxnResult of a successful multi; zxid is its zxid.
func (b *Backend) results(ctx context.Context, ops []core.Op, plan []zop, res []zk.MultiResponse, zxid int64) (core.TxnResult, error) {
	out := core.TxnResult{Results: make([]core.OpResult, len(ops))}
	if len(res) != len(plan) {
		return core.TxnResult{}, fmt.Errorf("%w: multi answered %d results for %d ops", core.ErrUnavailable, len(res), len(plan))
	}
	var readBack []int // caller op indexes whose stat is read after the multi
	for k, z := range plan {
		if z.orig < 0 || z.parent {
			continue
		}
		op := ops[z.orig]
		r := core.OpResult{Type: op.Type, Path: op.Path}
		switch op.Type {
		case core.OpCreate:
			r.Path = b.rel(res[k].String)
			readBack = append(readBack, z.orig)
		case core.OpSet:
			r.Stat = convStat(res[k].Stat)
		case core.OpCheck:
			readBack = append(readBack, z.orig)
		}
		out.Results[z.orig] = r
	}
	if len(readBack) > 0 {
		// The multi is done; a failure here only leaves stats empty.
		_ = parallel(len(readBack), func(j int) error {
			i := readBack[j]
			var st *zk.Stat
			var ok bool
			err := b.read(ctx, func() error {
				var err error
				ok, st, err = b.conn.Exists(b.zpath(out.Results[i].Path))
				return err
			})
			if err == nil && ok {
				out.Results[i].Stat = convStat(st)
			}
			return nil
		})
	}
	out.Revision = zxid
	// A create's stat is the node's right after that op (core.OpResult),
	// not after the whole multi or later changes: a node read back with
	// the multi's zxid as its creation is the one this multi made, so its
	// stat at creation is known but for what read back supplies (times,
	// owner): version 0, modified at creation, its data, no children.
	for _, i := range readBack {
		st := &out.Results[i].Stat
		if ops[i].Type != core.OpCreate || st.CreateRevision != out.Revision {
			continue
		}
		st.Version = 0
		st.ModifyRevision = st.CreateRevision
		st.ModifyTime = st.CreateTime
		st.DataLength = int32(len(ops[i].Data))
		st.NumChildren = 0
	}
	return out, nil
}

// ZooKeeper's wire opcodes and its multi's op header (type, done, err).
const (
	zkOpCreate  = 1
	zkOpDelete  = 2
	zkOpSetData = 5
	zkOpCheck   = 13
	zkOpMulti   = 14
	zkOpError   = -1
	// zkStatSize is a stat's size on the wire.
	zkStatSize = 68
)

// multiExact runs a plan as one multi written on the library's connection
// by the backend itself (wireState.call), so that the reply's zxid, which
// the library does not hand out, is known.
// It answers like the library's Multi: per-op results with the first
// failing op's error also returned; a lost connection gives an error
// with no results (outcome unknown). Until a connection is established
// nothing is sent, and it waits for one (bounded by ctx).
func (b *Backend) multiExact(ctx context.Context, plan []zop) ([]zk.MultiResponse, int64, error) {
	req := make([]byte, 0, 64*len(plan))
	putStr := func(s string) {
		req = binary.BigEndian.AppendUint32(req, uint32(len(s)))
		req = append(req, s...)
	}
	putHeader := func(typ int32, done bool, err int32) {
		req = binary.BigEndian.AppendUint32(req, uint32(typ))
		if done {
			req = append(req, 1)
		} else {
			req = append(req, 0)
		}
		req = binary.BigEndian.AppendUint32(req, uint32(err))
	}
	putData := func(d []byte) {
		if d == nil {
			req = binary.BigEndian.AppendUint32(req, math.MaxUint32) // -1: null
			return
		}
		req = binary.BigEndian.AppendUint32(req, uint32(len(d)))
		req = append(req, d...)
	}
	for _, z := range plan {
		switch r := z.req.(type) {
		case *zk.CreateRequest:
			putHeader(zkOpCreate, false, -1)
			putStr(r.Path)
			putData(r.Data)
			req = binary.BigEndian.AppendUint32(req, uint32(len(r.Acl)))
			for _, a := range r.Acl {
				req = binary.BigEndian.AppendUint32(req, uint32(a.Perms))
				putStr(a.Scheme)
				putStr(a.ID)
			}
			req = binary.BigEndian.AppendUint32(req, uint32(r.Flags))
		case *zk.SetDataRequest:
			putHeader(zkOpSetData, false, -1)
			putStr(r.Path)
			putData(r.Data)
			req = binary.BigEndian.AppendUint32(req, uint32(r.Version))
		case *zk.DeleteRequest:
			putHeader(zkOpDelete, false, -1)
			putStr(r.Path)
			req = binary.BigEndian.AppendUint32(req, uint32(r.Version))
		case *zk.CheckVersionRequest:
			putHeader(zkOpCheck, false, -1)
			putStr(r.Path)
			req = binary.BigEndian.AppendUint32(req, uint32(r.Version))
		default:
			return nil, 0, fmt.Errorf("%w: op %T in a multi", core.ErrInvalidArgument, z.req)
		}
	}
	putHeader(-1, true, -1)

	var rep reply
	err := b.do(ctx, func() error {
		wait := retry.New(b.opts.RetryWait, 4*b.opts.RetryWait)
		// Nothing is sent without a connection: wait for one while the
		// library tries each server once (as it fails its own requests
		// then), and at most zookeeper.client.connection-timeout.
		cctx, cancel := context.WithTimeout(ctx, b.opts.ConnectionTimeout)
		defer cancel()
		dials := b.wire.dials.Load()
		for {
			var err error
			rep, err = b.wire.call(ctx, zkOpMulti, req)
			if !errors.Is(err, errNotSent) {
				return err
			}
			if b.wire.dials.Load()-dials > int64(len(b.servers)) {
				return fmt.Errorf("%w: transaction not sent: no server of %d accepted a connection", errNotSentUnavailable, len(b.servers))
			}
			if !retry.Sleep(cctx, wait.Next(), b.closeCh) {
				switch {
				case ctx.Err() != nil:
					return ctx.Err()
				case cctx.Err() == nil:
					return core.ErrClosed
				}
				return fmt.Errorf("%w: transaction not sent: no connection to a ZooKeeper server within zookeeper.client.connection-timeout (%v)",
					errNotSentUnavailable, b.opts.ConnectionTimeout)
			}
		}
	})
	if err != nil {
		if errors.Is(err, errReplyLost) {
			return nil, 0, zk.ErrConnectionClosed
		}
		return nil, 0, err
	}
	if rep.err != 0 {
		// The whole request was refused before it ran.
		return nil, 0, zkCodeErr(rep.err)
	}
	res, err := decodeMultiReply(rep.body, len(plan))
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %v", core.ErrUnavailable, err)
	}
	for _, r := range res {
		if r.Error != nil {
			return res, rep.zxid, r.Error
		}
	}
	return res, rep.zxid, nil
}

// decodeMultiReply reads a multi's per-op results: a header, then an error
// code for a failed op, the path of a create, the stat of a set (deletes
// and checks have no body).
func decodeMultiReply(body []byte, n int) ([]zk.MultiResponse, error) {
	res := make([]zk.MultiResponse, 0, n)
	for {
		if len(body) < 9 {
			return nil, fmt.Errorf("zookeeper: truncated multi reply after %d results", len(res))
		}
		typ := int32(binary.BigEndian.Uint32(body[0:4]))
		done := body[4] != 0
		body = body[9:]
		if done {
			break
		}
		var r zk.MultiResponse
		switch typ {
		case zkOpError:
			if len(body) < 4 {
				return nil, fmt.Errorf("zookeeper: truncated multi error result")
			}
			if code := int32(binary.BigEndian.Uint32(body[0:4])); code != 0 {
				r.Error = zkCodeErr(code)
			}
			body = body[4:]
		case zkOpCreate:
			if len(body) < 4 {
				return nil, fmt.Errorf("zookeeper: truncated multi create result")
			}
			l := int(int32(binary.BigEndian.Uint32(body[0:4])))
			if l < 0 || 4+l > len(body) {
				return nil, fmt.Errorf("zookeeper: bad path length %d in a multi create result", l)
			}
			r.String = string(body[4 : 4+l])
			body = body[4+l:]
		case zkOpSetData:
			if len(body) < zkStatSize {
				return nil, fmt.Errorf("zookeeper: truncated multi set result")
			}
			r.Stat = decodeStat(body)
			body = body[zkStatSize:]
		case zkOpDelete, zkOpCheck:
		default:
			return nil, fmt.Errorf("zookeeper: unexpected result type %d in a multi", typ)
		}
		res = append(res, r)
	}
	if len(res) != n {
		return nil, fmt.Errorf("zookeeper: multi answered %d results for %d ops", len(res), n)
	}
	return res, nil
}

// decodeStat reads a stat off the wire (b holds at least zkStatSize bytes).
func decodeStat(b []byte) *zk.Stat {
	u64 := func(i int) int64 { return int64(binary.BigEndian.Uint64(b[i : i+8])) }
	u32 := func(i int) int32 { return int32(binary.BigEndian.Uint32(b[i : i+4])) }
	return &zk.Stat{Czxid: u64(0), Mzxid: u64(8), Ctime: u64(16), Mtime: u64(24),
		Version: u32(32), Cversion: u32(36), Aversion: u32(40), EphemeralOwner: u64(44),
		DataLength: u32(52), NumChildren: u32(56), Pzxid: u64(60)}
}

// zkCodeErr is the client library's error for a ZooKeeper error code.
func zkCodeErr(code int32) error {
	switch code {
	case -101:
		return zk.ErrNoNode
	case -102:
		return zk.ErrNoAuth
	case -103:
		return zk.ErrBadVersion
	case -108:
		return zk.ErrNoChildrenForEphemerals
	case -110:
		return zk.ErrNodeExists
	case -111:
		return zk.ErrNotEmpty
	case -112:
		return zk.ErrSessionExpired
	case -114:
		return zk.ErrInvalidACL
	case -115:
		return zk.ErrAuthFailed
	case -118:
		return zk.ErrSessionMoved
	case -8:
		return zk.ErrBadArguments
	case -2:
		// An op after the failing one: rolled back, not itself refused.
		return errRolledBack
	}
	return fmt.Errorf("zookeeper: error code %d", code)
}

// errNotSentUnavailable: multiExact found no connection to send on within
// the connection timeout; nothing was sent.
var errNotSentUnavailable = fmt.Errorf("%w: not applied", core.ErrUnavailable)

// errRolledBack marks the ops of a failed multi other than the one that
// failed.
var errRolledBack = errors.New("zookeeper: rolled back (another op of the multi failed)")
