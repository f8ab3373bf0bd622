package catalog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
)

// A request record is committed in the write's own transaction, with the
// result; a second write with the same id is refused and changes nothing.
func TestRequestRecordInSameTxn(t *testing.T) {
	f := newFixture(t, 1, 2)
	ctx := context.Background()
	if _, err := f.cat.CreateDatabase(ctx, "db", catalog.DatabaseRegistration{}, false); err != nil {
		t.Fatal(err)
	}
	rctx := catalog.WithRequest(ctx, &catalog.RequestRecord{ID: "r1", Method: "CreateTable", BodyHash: "h1"})
	info, err := f.cat.CreateTable(rctx, "db", "t", ordersSpec(), false)
	if err != nil {
		t.Fatal(err)
	}
	rec := mustExist(t, f.b, catalog.RequestPath("r1"))
	table := mustExist(t, f.b, catalog.TablePath("db", "t"))
	if rec.Stat.CreateRevision != table.Stat.CreateRevision {
		t.Fatalf("record revision %d, table revision %d: not one transaction", rec.Stat.CreateRevision, table.Stat.CreateRevision)
	}
	got, found, err := f.cat.Request(ctx, "r1")
	if err != nil || !found || got.TableID != info.Registration.TableID || got.Method != "CreateTable" || got.BodyHash != "h1" {
		t.Fatalf("record %+v found=%v err=%v; table id %d", got, found, err, info.Registration.TableID)
	}

	again := catalog.WithRequest(ctx, &catalog.RequestRecord{ID: "r1", Method: "CreateTable", BodyHash: "h1"})
	if _, err := f.cat.CreateTable(again, "db", "t2", ordersSpec(), false); !errors.Is(err, catalog.ErrDuplicateRequest) {
		t.Fatalf("second write with id r1: %v, want ErrDuplicateRequest", err)
	}
	if _, err := core.Get(ctx, f.b, catalog.TablePath("db", "t2")); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("refused write created db.t2: %v", err)
	}
	// AllocateIDs records its range.
	actx := catalog.WithRequest(ctx, &catalog.RequestRecord{ID: "a1", Method: "AllocateIDs"})
	first, err := f.cat.AllocateIDs(actx, "writer", 5)
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := f.cat.Request(ctx, "a1"); got.First != first || got.Count != 5 {
		t.Fatalf("allocate record %+v, want first %d count 5", got, first)
	}
}

func TestValidateRequestID(t *testing.T) {
	for _, id := range []string{"", "..", "a/b", "a b", string(make([]byte, catalog.MaxRequestIDLength+1))} {
		if err := catalog.ValidateRequestID(id); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("request id %q: %v, want ErrInvalidArgument", id, err)
		}
	}
	if err := catalog.ValidateRequestID("0f3a-b_c.d"); err != nil {
		t.Errorf("good id refused: %v", err)
	}
}

// CleanRequests removes the records past the TTL and, beyond the count,
// the oldest; the others stay.
func TestCleanRequests(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	now := int64(1_000_000)
	cat := catalog.New(f.b, catalog.Options{Fence: f.lead.Fence(), Now: func() time.Time { return time.UnixMilli(now) }})
	for i := range 6 {
		now = 1_000_000 + int64(i)*1000
		rctx := catalog.WithRequest(ctx, &catalog.RequestRecord{ID: fmt.Sprintf("r%d", i), Method: "CreateDatabase"})
		if _, err := cat.CreateDatabase(rctx, fmt.Sprintf("db%d", i), catalog.DatabaseRegistration{}, false); err != nil {
			t.Fatal(err)
		}
	}
	// TTL 3.5s at 1_005_000: r0, r1 (at 1_000_000, 1_001_000) expire.
	n, err := cat.CleanRequests(ctx, 1_005_000, 3500, 0, 1)
	if err != nil || n != 2 {
		t.Fatalf("cleanup by age removed %d (%v), want 2", n, err)
	}
	// At most 2 kept: r2, r3 go (oldest first).
	n, err = cat.CleanRequests(ctx, 1_005_000, 1<<40, 2, 100)
	if err != nil || n != 2 {
		t.Fatalf("cleanup by count removed %d (%v), want 2", n, err)
	}
	ids, _, err := f.b.Children(ctx, catalog.RequestsPath, core.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ids) != "[r4 r5]" {
		t.Fatalf("records left %v, want [r4 r5]", ids)
	}
	for i := range 6 {
		mustExist(t, f.b, catalog.DatabasePath(fmt.Sprintf("db%d", i)))
	}
	var rec catalog.RequestRecord
	if err := json.Unmarshal(mustExist(t, f.b, catalog.RequestPath("r5")).Data, &rec); err != nil || rec.Time != 1_005_000 {
		t.Fatalf("record r5 %+v (%v), want time 1005000", rec, err)
	}
}
