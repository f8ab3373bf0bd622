package netfault

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/metaplane/metaplane/adminapi"
	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/core"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// The checked history: clients run admin writes (create and drop of
// databases and tables, id allocations) and reads through the admin
// client while the nemesis acts. Each database and each table is a key
// whose state is "absent" or "present with table id N"; porcupine checks
// the history of every key for linearizability. A write whose outcome the
// client does not know (a timeout, an unavailable leader) is pending: it
// may take effect at any moment after its call. Besides: acknowledged id
// ranges never overlap, nor do the table ids of acknowledged creates, and
// after healing every key is as its last acknowledged write left it.

// Op kinds.
const (
	OpCreate = "create"
	OpDrop   = "drop"
	OpGet    = "get"
)

// keyInput is an operation on one key ("db/NAME" or "table/DB.NAME").
type keyInput struct {
	Op  string
	Key string
	// An AdjustIsr (OpIsrAdjust): the bucket epoch it is asked at and the
	// ISR it asks for (isrString).
	Expect int32
	NewIsr string
}

// keyOutput is its answer.
type keyOutput struct {
	OK      bool  // create or drop applied; get found the key
	ID      int64 // the table id created or read (0 for databases)
	Unknown bool  // the call failed: the outcome of a write is unknown
	// The bucket's record an OpIsrGet read or an OpIsrAdjust answered
	// (Epoch 0: none), and an AdjustIsr's refusal.
	Epoch int32
	Isr   string
	Code  string
}

type keyState struct {
	present bool
	id      int64 // -1: present, id not known (created by a write of unknown outcome)
	// The bucket key's last known record (epoch 0: none yet).
	epoch int32
	isr   string
}

// KeyModel is the porcupine model of the keys, partitioned by key.
var KeyModel = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, o := range h {
			k := o.Input.(keyInput).Key
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], o)
		}
		sort.Strings(keys)
		var out [][]porcupine.Operation
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() []any { return []any{keyState{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(keyState), input.(keyInput), output.(keyOutput)
		if in.Op == OpIsrGet || in.Op == OpIsrAdjust {
			return isrStep(s, in, out)
		}
		switch in.Op {
		case OpGet:
			switch {
			case !out.OK && !s.present:
				return []any{s}
			case out.OK && s.present && (s.id == out.ID || s.id == -1):
				return []any{keyState{present: true, id: out.ID}}
			}
			return nil
		case OpCreate:
			switch {
			case out.Unknown && s.present:
				return []any{s}
			case out.Unknown:
				return []any{s, keyState{present: true, id: -1}}
			case out.OK && !s.present:
				return []any{keyState{present: true, id: out.ID}}
			case !out.OK && s.present:
				return []any{s}
			}
			return nil
		case OpDrop:
			switch {
			case out.Unknown:
				return []any{s, keyState{}}
			case out.OK && s.present:
				return []any{keyState{}}
			case !out.OK && !s.present:
				return []any{s}
			}
			return nil
		}
		return nil
	},
	Equal: func(a, b any) bool { return a.(keyState) == b.(keyState) },
	DescribeOperation: func(input, output any) string {
		in, out := input.(keyInput), output.(keyOutput)
		switch {
		case in.Op == OpIsrAdjust && out.Unknown:
			return fmt.Sprintf("adjust-isr %s at bucket epoch %d to [%s] -> ?", in.Key, in.Expect, in.NewIsr)
		case in.Op == OpIsrAdjust:
			return fmt.Sprintf("adjust-isr %s at bucket epoch %d to [%s] -> ok=%v %s epoch %d isr [%s]", in.Key, in.Expect, in.NewIsr, out.OK, out.Code, out.Epoch, out.Isr)
		case in.Op == OpIsrGet:
			return fmt.Sprintf("get %s -> bucket epoch %d isr [%s]", in.Key, out.Epoch, out.Isr)
		case out.Unknown:
			return fmt.Sprintf("%s %s -> ?", in.Op, in.Key)
		case in.Op == OpGet && out.OK:
			return fmt.Sprintf("get %s -> present id %d", in.Key, out.ID)
		case in.Op == OpGet:
			return fmt.Sprintf("get %s -> absent", in.Key)
		}
		return fmt.Sprintf("%s %s -> ok=%v id=%d", in.Op, in.Key, out.OK, out.ID)
	},
}

// pending is the return time of an operation of unknown outcome: after
// every other.
const pending = int64(1) << 62

// IDRange is an acknowledged allocation [First, First+Count).
type IDRange struct{ First, Count int64 }

// History is what the clients did. Its methods are safe for concurrent
// use.
type History struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
	ids   []IDRange
	acks  []time.Duration // when each acknowledged write returned, since start
	calls int
}

// NewHistory starts an empty history now.
func NewHistory() *History { return &History{start: time.Now()} }

func (h *History) now() int64 { return time.Since(h.start).Nanoseconds() }

func (h *History) record(client int, in keyInput, out keyOutput, call int64) {
	ret := h.now()
	if out.Unknown {
		ret = pending
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls++
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	if !out.Unknown && in.Op != OpGet && in.Op != OpIsrGet {
		h.acks = append(h.acks, time.Duration(ret))
	}
}

// Ops is a copy of the recorded operations.
func (h *History) Ops() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]porcupine.Operation(nil), h.ops...)
}

// Client is one client of the history: an admin client in the root
// namespace and its id.
type Client struct {
	ID int
	C  *adminclient.Client
	H  *History
	// CallTimeout bounds one call, its redirects and retries included.
	CallTimeout time.Duration
	// Buckets: the workload reads and adjusts the ISR of nf.isr's bucket
	// too (SetUpIsr made it).
	Buckets bool
}

// Database is the database that holds the tables of the workload.
const Database = "nf"

// call runs one operation on key and records it. A read that failed is
// left out (it says nothing); a write that failed is recorded pending.
// It returns whether the call was answered.
func (c *Client) call(ctx context.Context, op, key string) bool {
	cctx, cancel := context.WithTimeout(ctx, c.CallTimeout)
	defer cancel()
	in := keyInput{Op: op, Key: key}
	call := c.H.now()
	kind, name, _ := strings.Cut(key, "/")
	var out keyOutput
	var err error
	switch kind + " " + op {
	case "db create":
		err = c.C.Admin(cctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
			_, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: name})
			return err
		})
	case "db drop":
		err = c.C.Admin(cctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
			_, err := a.DropDatabase(ctx, &adminv1.DropDatabaseRequest{Name: name})
			return err
		})
	case "db get":
		err = c.C.Admin(cctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
			_, err := a.GetDatabase(ctx, &adminv1.GetDatabaseRequest{Name: name})
			return err
		})
	case "table create":
		err = c.C.Admin(cctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
			r, err := a.CreateTable(ctx, &adminv1.CreateTableRequest{Database: Database, Table: name, Descriptor_: tableDescriptor()})
			if err == nil {
				out.ID = r.GetTable().GetTableId()
			}
			return err
		})
	case "table drop":
		err = c.C.Admin(cctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
			_, err := a.DropTable(ctx, &adminv1.DropTableRequest{Database: Database, Table: name})
			return err
		})
	case "table get":
		err = c.C.Admin(cctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
			r, err := a.GetTableInfo(ctx, &adminv1.GetTableInfoRequest{Database: Database, Table: name})
			if err == nil {
				out.ID = r.GetTable().GetTableId()
			}
			return err
		})
	default:
		panic("netfault: unknown operation " + kind + " " + op)
	}
	err = adminapi.FromStatus(err)
	switch {
	case err == nil:
		out.OK = true
	case op == OpCreate && errors.Is(err, core.ErrNodeExists),
		op != OpCreate && errors.Is(err, core.ErrNotFound):
		out.OK, out.ID = false, 0
	case op == OpGet:
		return false
	default:
		out = keyOutput{Unknown: true}
	}
	c.H.record(c.ID, in, out, call)
	return !out.Unknown
}

// allocate allocates count ids and records the range when acknowledged.
func (c *Client) allocate(ctx context.Context, count int64) bool {
	cctx, cancel := context.WithTimeout(ctx, c.CallTimeout)
	defer cancel()
	var r *adminv1.AllocateIDsResponse
	err := c.C.Admin(cctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		var err error
		r, err = a.AllocateIDs(ctx, &adminv1.AllocateIDsRequest{Counter: "writer", Count: count})
		return err
	})
	c.H.mu.Lock()
	defer c.H.mu.Unlock()
	c.H.calls++
	if err != nil {
		return false
	}
	c.H.ids = append(c.H.ids, IDRange{First: r.First, Count: r.Count})
	c.H.acks = append(c.H.acks, time.Duration(c.H.now()))
	return true
}

// tableDescriptor is the workload's table: one column, one bucket.
func tableDescriptor() *adminv1.TableDescriptor {
	return &adminv1.TableDescriptor{
		Columns:     []*adminv1.Column{{Name: "id", Type: "BIGINT"}},
		BucketCount: 1,
	}
}

// Keys of the workload: a few databases and tables, so that clients
// contend on each.
func Keys(tables, dbs int) []string {
	var k []string
	for i := 0; i < dbs; i++ {
		k = append(k, fmt.Sprintf("db/d%d", i))
	}
	for i := 0; i < tables; i++ {
		k = append(k, fmt.Sprintf("table/t%d", i))
	}
	return k
}

// Run runs the client's workload on keys until ctx ends: random creates,
// drops and reads, an id allocation now and then, and (Buckets) a read
// and an AdjustIsr of nf.isr's bucket. A write that was
// not answered is called again until it is (or ctx ends) before the
// client moves on, so that an unavailable cluster adds one pending write
// per client and not thousands.
func (c *Client) Run(ctx context.Context, keys []string, rng *rand.Rand) {
	for ctx.Err() == nil {
		if rng.IntN(8) == 0 {
			for !c.allocate(ctx, 1+rng.Int64N(20)) && ctx.Err() == nil {
				c.pause(ctx)
			}
			continue
		}
		if c.Buckets && rng.IntN(6) == 0 {
			for !c.isr(ctx) && ctx.Err() == nil {
				c.pause(ctx)
			}
			continue
		}
		key := keys[rng.IntN(len(keys))]
		op := []string{OpCreate, OpDrop, OpGet, OpGet}[rng.IntN(4)]
		for !c.call(ctx, op, key) && ctx.Err() == nil {
			c.pause(ctx)
		}
	}
}

// pause waits a little before a call is made again (the admin client has
// already retried within its timeout).
func (c *Client) pause(ctx context.Context) {
	t := time.NewTimer(50 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// ReadAll reads every key until answered (within ctx), recording the
// reads: after healing, the final state joins the checked history.
func (c *Client) ReadAll(ctx context.Context, keys []string) error {
	for _, k := range keys {
		for !c.call(ctx, OpGet, k) {
			if ctx.Err() != nil {
				return fmt.Errorf("final read of %s: %w", k, ctx.Err())
			}
			c.pause(ctx)
		}
	}
	return nil
}

// Report is the result of a check.
type Report struct {
	Ops            int           // operations in the checked history (answered and pending)
	Pending        int           // of which of unknown outcome
	Calls          int           // calls made, id allocations included
	IDRanges       int           // acknowledged id allocations
	IsrAdjusts     int           // AdjustIsr calls answered (applied or refused)
	Linearizable   bool          // porcupine's verdict
	Undecided      bool          // porcupine timed out
	Lost           []string      // acknowledged writes not reflected in the final reads
	Overlaps       []string      // id ranges or table ids handed out twice
	LongestNoWrite time.Duration // the longest time between two acknowledged writes
	// Bad is, for a history that is not linearizable, each key whose own
	// history is not, with its operations (call and return times from the
	// first call, input and output), for the test's log.
	Bad []string
}

// Violations is the number of properties broken.
func (r Report) Violations() int {
	n := len(r.Lost) + len(r.Overlaps)
	if !r.Linearizable {
		n++
	}
	return n
}

func (r Report) String() string {
	return fmt.Sprintf("%d operations checked (%d pending, %d calls, %d id ranges, %d AdjustIsr answered), linearizable=%v undecided=%v, lost %d %v, overlaps %d %v, longest gap between acknowledged writes %v",
		r.Ops, r.Pending, r.Calls, r.IDRanges, r.IsrAdjusts, r.Linearizable, r.Undecided, len(r.Lost), r.Lost, len(r.Overlaps), r.Overlaps, r.LongestNoWrite.Round(time.Millisecond))
}

// Check checks the history: linearizability (porcupine, within timeout),
// id ranges and table ids, and acknowledged writes against the final
// reads (the last read of each key, made by ReadAll after healing).
func (h *History) Check(timeout time.Duration) Report {
	h.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.ops...)
	ids := append([]IDRange(nil), h.ids...)
	acks := append([]time.Duration(nil), h.acks...)
	calls := h.calls
	h.mu.Unlock()
	rep := Report{Ops: len(ops), Calls: calls, IDRanges: len(ids)}
	for _, o := range ops {
		if o.Return == pending {
			rep.Pending++
		} else if o.Input.(keyInput).Op == OpIsrAdjust {
			rep.IsrAdjusts++
		}
	}
	res := porcupine.CheckOperationsTimeout(KeyModel.ToModel(), ops, timeout)
	rep.Linearizable = res == porcupine.Ok
	rep.Undecided = res == porcupine.Unknown
	if res == porcupine.Illegal {
		rep.Bad = badKeys(ops, timeout)
	}
	// Id ranges.
	sort.Slice(ids, func(i, j int) bool { return ids[i].First < ids[j].First })
	for i := 1; i < len(ids); i++ {
		if p := ids[i-1]; p.First+p.Count > ids[i].First {
			rep.Overlaps = append(rep.Overlaps, fmt.Sprintf("ids [%d,+%d) and [%d,+%d)", p.First, p.Count, ids[i].First, ids[i].Count))
		}
	}
	tableIDs := map[int64]string{}
	for _, o := range ops {
		in, out := o.Input.(keyInput), o.Output.(keyOutput)
		if in.Op == OpCreate && out.OK && strings.HasPrefix(in.Key, "table/") {
			if k, dup := tableIDs[out.ID]; dup {
				rep.Overlaps = append(rep.Overlaps, fmt.Sprintf("table id %d created for %s and %s", out.ID, k, in.Key))
			}
			tableIDs[out.ID] = in.Key
		}
	}
	rep.Lost = lostWrites(ops)
	sort.Slice(acks, func(i, j int) bool { return acks[i] < acks[j] })
	for i := 1; i < len(acks); i++ {
		rep.LongestNoWrite = max(rep.LongestNoWrite, acks[i]-acks[i-1])
	}
	return rep
}

// lostWrites: for each key, an acknowledged write after which no other
// write on the key was called must be what the key's last read (which
// came after it) shows.
func lostWrites(ops []porcupine.Operation) []string {
	byKey := map[string][]porcupine.Operation{}
	for _, o := range ops {
		k := o.Input.(keyInput).Key
		byKey[k] = append(byKey[k], o)
	}
	var lost []string
	for k, kops := range byKey {
		if strings.HasPrefix(k, "bucket/") {
			continue // no write of its own is the last: others change it too
		}
		var lastRead *porcupine.Operation
		var lastWrite *porcupine.Operation
		for i := range kops {
			o := &kops[i]
			in := o.Input.(keyInput)
			if in.Op == OpGet {
				if lastRead == nil || o.Call > lastRead.Call {
					lastRead = o
				}
				continue
			}
			if lastWrite == nil || o.Call > lastWrite.Call {
				lastWrite = o
			}
		}
		if lastRead == nil || lastWrite == nil || lastRead.Call < lastWrite.Return {
			continue
		}
		w, r := lastWrite.Output.(keyOutput), lastRead.Output.(keyOutput)
		if w.Unknown || !w.OK {
			continue
		}
		// No other write was called after lastWrite, and lastRead came after
		// it returned. A write called earlier that returned after
		// lastWrite was called (acknowledged or pending) may have taken
		// effect after it: such keys are left to the linearizability check.
		overlapped := false
		for i := range kops {
			o := &kops[i]
			if o != lastWrite && o.Input.(keyInput).Op != OpGet && o.Return > lastWrite.Call {
				overlapped = true
			}
		}
		if overlapped {
			continue
		}
		want := lastWrite.Input.(keyInput).Op == OpCreate
		if r.OK != want {
			lost = append(lost, fmt.Sprintf("%s: acknowledged %s, final read present=%v", k, lastWrite.Input.(keyInput).Op, r.OK))
		}
	}
	sort.Strings(lost)
	return lost
}

// StaleControl is the negative control: the same history as read through
// a deliberately stale path, a reader that answers every read of a key
// with the first answer it got for it (a cache never invalidated), after
// a sequence that makes such a read wrong every time: the key
// "table/control" is read, then created (acknowledged) by client id and
// read again through the cache. Check must find it not linearizable.
func (h *History) StaleControl(ctx context.Context, c *Client) (*History, error) {
	key := "table/control"
	if !c.call(ctx, OpGet, key) {
		return nil, errors.New("negative control: first read not answered")
	}
	for !c.call(ctx, OpCreate, key) {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("negative control: create: %w", ctx.Err())
		}
		c.pause(ctx)
	}
	if !c.call(ctx, OpGet, key) {
		return nil, errors.New("negative control: second read not answered")
	}
	ops := h.Ops()
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	first := map[string]keyOutput{}
	stale := &History{start: h.start}
	for _, o := range ops {
		in := o.Input.(keyInput)
		if in.Op == OpGet {
			if f, ok := first[in.Key]; ok {
				o.Output = f
			} else {
				first[in.Key] = o.Output.(keyOutput)
			}
		}
		stale.ops = append(stale.ops, o)
	}
	return stale, nil
}

// badKeys checks each key's history alone and describes those that are not
// linearizable.
func badKeys(ops []porcupine.Operation, timeout time.Duration) []string {
	byKey := map[string][]porcupine.Operation{}
	var t0 int64 = -1
	for _, o := range ops {
		k := o.Input.(keyInput).Key
		byKey[k] = append(byKey[k], o)
		if t0 < 0 || o.Call < t0 {
			t0 = o.Call
		}
	}
	var bad []string
	for k, kops := range byKey {
		if porcupine.CheckOperationsTimeout(KeyModel.ToModel(), kops, timeout) != porcupine.Illegal {
			continue
		}
		sort.Slice(kops, func(i, j int) bool { return kops[i].Call < kops[j].Call })
		var b strings.Builder
		fmt.Fprintf(&b, "key %s:", k)
		for _, o := range kops {
			ret := "pending"
			if o.Return != pending {
				ret = fmt.Sprintf("%.3fs", float64(o.Return-t0)/1e9)
			}
			fmt.Fprintf(&b, "\n  client %d %.3fs..%s %+v -> %+v", o.ClientId, float64(o.Call-t0)/1e9, ret, o.Input, o.Output)
		}
		bad = append(bad, b.String())
	}
	sort.Strings(bad)
	return bad
}
