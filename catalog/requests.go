package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/metaplane/metaplane/core"
)

// Request records make admin writes exactly-once: a write that carries a
// client-generated request id commits, in the same fenced transaction as
// its effect, a record at RequestsPath/<id> holding what the caller needs
// back (the created table's id, the allocated range, ...). A retry with the
// same id finds the record and is answered from it instead of applying the
// write again. The records live under a metaplane-owned path, outside the
// original layout, and the leader removes them after RequestRetention (or
// when more than MaxRequestRecords exist, oldest first).
const (
	// RequestsRoot is the metaplane-owned subtree; RequestsPath holds the
	// request records.
	RequestsRoot = "/metaplane"
	RequestsPath = "/metaplane/requests"
	// MaxRequestIDLength bounds a request id (characters [A-Za-z0-9._-]).
	MaxRequestIDLength = 128
)

// ErrDuplicateRequest is the error of a write whose request record already
// exists: the same request id was applied meanwhile (a concurrent retry).
// Nothing was changed by this write; read the record (Request) for the
// original result.
var ErrDuplicateRequest = errors.New("catalog: request id already applied")

// RequestRecord is what a request id's record holds.
type RequestRecord struct {
	ID       string `json:"-"`
	Method   string `json:"method"`
	BodyHash string `json:"body_hash"` // hex SHA-256 of the request body
	Time     int64  `json:"time"`      // commit time, ms since the epoch
	// The result the caller needs back (fields unused by a method are 0).
	TableID     int64 `json:"table_id,omitempty"`
	PartitionID int64 `json:"partition_id,omitempty"`
	First       int64 `json:"first,omitempty"`
	Count       int64 `json:"count,omitempty"`
	N           int   `json:"n,omitempty"` // entries added or removed

	// Revision is the revision of the transaction that committed the
	// record (and the operation's write), as Request read it.
	Revision int64 `json:"-"`

	committed bool // set when a transaction of this operation committed the record
}

// Committed reports whether the operation run with r (see WithRequest)
// committed r with its write. False after an operation that wrote nothing
// (an if-exists create of an existing node, an ACL already present) or
// that failed.
func (r *RequestRecord) Committed() bool { return r.committed }

// LeadersPath holds the leader coordinators' markers: each leader creates
// the ephemeral LeaderMarkerPath(epoch) when it starts, and serves once its
// metadata image has applied it. A store's own state, as the migration
// marker is: never copied, compared or counted by a migration.
const LeadersPath = "/metaplane-leaders"

// LeaderMarkerPath is /metaplane-leaders/<epoch>.
func LeaderMarkerPath(epoch int64) string {
	return core.JoinPath(LeadersPath, strconv.FormatInt(epoch, 10))
}

// RequestPath is /metaplane/requests/<id>.
func RequestPath(id string) string { return core.JoinPath(RequestsPath, id) }

// ValidateRequestID checks a request id's length and characters.
func ValidateRequestID(id string) error {
	if len(id) == 0 || len(id) > MaxRequestIDLength {
		return invalidField("request_id", "request id %q: want 1 to %d characters", id, MaxRequestIDLength)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') || id == "." || id == ".." {
			return invalidField("request_id", "request id %q: only letters, digits, '.', '_' and '-' are allowed", id)
		}
	}
	return nil
}

type requestKey struct{}

// WithRequest returns ctx carrying rec: the next successful write of a
// catalog operation made with it commits rec (with the result the
// operation fills in) in its transaction. rec must be used for one
// operation only.
func WithRequest(ctx context.Context, rec *RequestRecord) context.Context {
	return context.WithValue(ctx, requestKey{}, rec)
}

func requestOf(ctx context.Context) *RequestRecord {
	rec, _ := ctx.Value(requestKey{}).(*RequestRecord)
	return rec
}

// setResult lets an operation record its result in ctx's request record.
func setResult(ctx context.Context, f func(r *RequestRecord)) {
	if rec := requestOf(ctx); rec != nil {
		f(rec)
	}
}

// requestOp is the create of ctx's request record, or false without one.
func (c *Catalog) requestOp(ctx context.Context) (core.Op, bool) {
	rec := requestOf(ctx)
	if rec == nil {
		return core.Op{}, false
	}
	rec.Time = c.nowMillis()
	data, _ := json.Marshal(rec) // plain fields always encode
	return core.CreateOp(RequestPath(rec.ID), data, core.Persistent).WithParents(), true
}

// markCommitted records that ctx's request record was committed.
func markCommitted(ctx context.Context) {
	if rec := requestOf(ctx); rec != nil {
		rec.committed = true
	}
}

// Request reads request id's record (linearizably, from the backend).
// found is false when there is none. Errors: ErrBadRecord, backend errors.
func (c *Catalog) Request(ctx context.Context, id string) (rec RequestRecord, found bool, err error) {
	n, err := core.Get(ctx, c.b, RequestPath(id))
	if errors.Is(err, core.ErrNotFound) {
		return RequestRecord{}, false, nil
	}
	if err != nil {
		return RequestRecord{}, false, err
	}
	if err := json.Unmarshal(n.Data, &rec); err != nil {
		return RequestRecord{}, false, fmt.Errorf("%w: request record %s: %v", ErrBadRecord, id, err)
	}
	rec.ID = id
	rec.Revision = n.Stat.CreateRevision
	return rec, true, nil
}

// CleanRequests deletes the request records committed before now-ttl and,
// beyond max records (max > 0), the oldest ones. It deletes in
// transactions of at most batch records, each its own small fenced write,
// so it never holds up other writes for long; a record that a concurrent
// cleanup removed first is skipped. It returns how many it deleted.
func (c *Catalog) CleanRequests(ctx context.Context, nowMillis int64, ttlMillis int64, max int, batch int) (int, error) {
	if batch < 1 {
		batch = 100
	}
	ids, _, err := c.b.Children(ctx, RequestsPath, core.ReadOptions{})
	if errors.Is(err, core.ErrNotFound) || len(ids) == 0 {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	type entry struct {
		path    string
		time    int64
		version int64
	}
	entries := make([]entry, 0, len(ids))
	for start := 0; start < len(ids); start += 1000 {
		end := min(start+1000, len(ids))
		paths := make([]string, 0, end-start)
		for _, id := range ids[start:end] {
			paths = append(paths, RequestPath(id))
		}
		res, err := c.b.GetMany(ctx, paths, core.ReadOptions{})
		if err != nil {
			return 0, err
		}
		for i, r := range res {
			if r.Err != nil {
				continue
			}
			var rec RequestRecord
			if json.Unmarshal(r.Node.Data, &rec) != nil {
				rec.Time = 0 // unreadable: the oldest
			}
			entries = append(entries, entry{paths[i], rec.Time, r.Node.Stat.Version})
		}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].time < entries[j].time })
	cut := 0
	for cut < len(entries) && (entries[cut].time < nowMillis-ttlMillis || (max > 0 && len(entries)-cut > max)) {
		cut++
	}
	deleted := 0
	for start := 0; start < cut; start += batch {
		end := min(start+batch, cut)
		ops := make([]core.Op, 0, end-start)
		for _, e := range entries[start:end] {
			ops = append(ops, core.DeleteOp(e.path, e.version))
		}
		if _, err := c.txn(ctx, ops); err != nil {
			if core.FailedOpIndex(err) < 0 {
				return deleted, err
			}
			// One went meanwhile: delete the rest one by one.
			for _, op := range ops {
				if _, err := c.txn(ctx, []core.Op{op}); err == nil {
					deleted++
				} else if core.FailedOpIndex(err) < 0 {
					return deleted, err
				}
			}
			continue
		}
		deleted += len(ops)
	}
	return deleted, nil
}
