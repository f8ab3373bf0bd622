package coordinator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
)

// requestID returns the request id the caller sent in the
// adminapi.RequestIDHeader metadata ("" without one).
func requestID(ctx context.Context) string {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ""
	}
	if v := md.Get(adminapi.RequestIDHeader); len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// bodyHash is the hex SHA-256 of method and the request's deterministic
// encoding: what a retry with the same id must repeat.
func bodyHash(method string, r proto.Message) string {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(r)
	h := sha256.New()
	h.Write([]byte(method))
	h.Write([]byte{0})
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// inflight serializes the calls of one request id on this coordinator, so
// that a retry arriving while the first call is still running waits for
// its record instead of racing it.
type inflight struct {
	mu  sync.Mutex
	ids map[string]*sync.Mutex
	n   map[string]int
}

func (f *inflight) lock(id string) func() {
	f.mu.Lock()
	if f.ids == nil {
		f.ids, f.n = map[string]*sync.Mutex{}, map[string]int{}
	}
	m := f.ids[id]
	if m == nil {
		m = &sync.Mutex{}
		f.ids[id] = m
	}
	f.n[id]++
	f.mu.Unlock()
	m.Lock()
	return func() {
		m.Unlock()
		f.mu.Lock()
		if f.n[id]--; f.n[id] == 0 {
			delete(f.ids, id)
			delete(f.n, id)
		}
		f.mu.Unlock()
	}
}

// once runs a mutating admin call exactly once per request id: without an
// id it just runs do. With one, do runs with the record in its ctx, so that
// the catalog commits the record in the same fenced transaction as the
// write; the record's create is what makes the call exactly-once: when the
// id was applied before (by this coordinator or another), that create
// fails and the whole transaction with it, changing nothing. Only a call
// that did not commit its record (a refusal, an ambiguous failure, or a
// write that changed nothing) reads the record: a recorded request with the
// same method and body is answered by replay from its record; one with a
// different method or body is refused with INVALID_ARGUMENT naming the id.
// So the common call, a new id, costs its transaction and no read.
func once[Resp any](a *adminService, ctx context.Context, l *leaderState, method string, r proto.Message,
	do func(ctx context.Context) (Resp, error), replay func(ctx context.Context, rec catalog.RequestRecord) (Resp, error)) (Resp, error) {
	return runOnce(a, ctx, l, method, r, false, do, replay)
}

// onceLookupFirst is once for a call whose do has an effect outside its
// transaction that a repetition must not repeat (AllocateIDs takes ids
// from the leadership's block before it commits): it reads the record
// before running do.
func onceLookupFirst[Resp any](a *adminService, ctx context.Context, l *leaderState, method string, r proto.Message,
	do func(ctx context.Context) (Resp, error), replay func(ctx context.Context, rec catalog.RequestRecord) (Resp, error)) (Resp, error) {
	return runOnce(a, ctx, l, method, r, true, do, replay)
}

func runOnce[Resp any](a *adminService, ctx context.Context, l *leaderState, method string, r proto.Message, lookupFirst bool,
	do func(ctx context.Context) (Resp, error), replay func(ctx context.Context, rec catalog.RequestRecord) (Resp, error)) (Resp, error) {
	var zero Resp
	if adminapi.SemanticsOf(method) != adminapi.ExactlyOnce {
		// A programming error: the method's semantics are declared in
		// adminapi's table, which the client SDK repeats calls by.
		return zero, fmt.Errorf("%s is not declared exactly-once in adminapi's table", methodName(method))
	}
	id := requestID(ctx)
	if id == "" {
		return do(ctx)
	}
	if err := catalog.ValidateRequestID(id); err != nil {
		return zero, err
	}
	unlock := a.s.requests.lock(id)
	defer unlock()
	hash := bodyHash(method, r)
	lookup := func() (Resp, bool, error) {
		rec, found, err := l.cat.Request(ctx, id)
		if err != nil || !found {
			return zero, false, err
		}
		if rec.Method != method || rec.BodyHash != hash {
			return zero, true, &adminapi.FieldError{Field: "request_id",
				Err: fmt.Errorf("%w: request id %q was used for a different request (%s with another body): use a new id for a new request",
					core.ErrInvalidArgument, id, methodName(rec.Method))}
		}
		// The recorded write is in the backend; the image this leader
		// answers reads from may not have it yet (its commit's answer was
		// lost, so the write was not applied to the image on return): a
		// replay answers once it has, so that a read right after sees the
		// write, as after the original answer.
		if err := l.img.WaitRevision(ctx, rec.Revision); err != nil {
			return zero, true, err
		}
		resp, err := replay(ctx, rec)
		return resp, true, err
	}
	if lookupFirst {
		if resp, found, err := lookup(); found || err != nil {
			return resp, err
		}
	}
	rec := &catalog.RequestRecord{ID: id, Method: method, BodyHash: hash}
	resp, err := do(catalog.WithRequest(ctx, rec))
	if err == nil && rec.Committed() {
		return resp, nil
	}
	// Not committed by this call: catalog.ErrDuplicateRequest (the id was
	// applied before), another refusal or an ambiguous failure of a write
	// this id committed (before, or on another coordinator), or a write
	// that changed nothing (which a repetition of an applied id answers as
	// the original did). The record, when there is one, answers.
	lresp, found, lerr := lookup()
	switch {
	case found:
		return lresp, lerr
	case err == nil && lerr != nil:
		// Whether this id was applied before is unknown: do not answer
		// as if it was not.
		return zero, lerr
	}
	return resp, err
}

func methodName(full string) string {
	for i := len(full) - 1; i >= 0; i-- {
		if full[i] == '/' {
			return full[i+1:]
		}
	}
	return full
}

// Retention of the request records of exactly-once admin writes.
const (
	DefaultRequestRetention  = 24 * time.Hour
	DefaultMaxRequestRecords = 100000
	requestCleanupBatch      = 100
)

// cleanRequests removes, every RequestCleanupInterval while st leads, the
// request records older than RequestRetention and the oldest beyond
// MaxRequestRecords. It runs beside the admin writes, in small
// transactions of its own, and never holds them up.
func (s *Server) cleanRequests(ctx context.Context, st *leaderState) {
	t := time.NewTicker(s.opts.RequestCleanupInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-st.lead.Lost():
			return
		case <-t.C:
		}
		n, err := st.cat.CleanRequests(ctx, time.Now().UnixMilli(), s.opts.RequestRetention.Milliseconds(),
			s.opts.MaxRequestRecords, requestCleanupBatch)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("request record cleanup failed; retried at the next interval", "err", err)
		}
		if n > 0 {
			s.log.Debug("removed expired request records", "count", n)
		}
	}
}
