package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
)

// lagAdmin is an AdminAPI whose partition listing shows created
// partitions only after `lag` further listings (as a coordinator image
// that follows the store late), and whose creates fail for the first
// `drop` partitions of the first round (as on a machine too slow for them).
type lagAdmin struct {
	mu       sync.Mutex
	created  map[string]bool
	shown    int
	lag      int
	drop     int
	failWith error
}

func (a *lagAdmin) CreateDatabase(context.Context, string) error            { return nil }
func (a *lagAdmin) CreateTable(context.Context, string, string, bool) error { return nil }
func (a *lagAdmin) DropTable(context.Context, string, string) error         { return nil }
func (a *lagAdmin) GetTableInfo(context.Context, string, string) error      { return nil }
func (a *lagAdmin) ListTables(context.Context, string) (int, error)         { return 0, nil }

func (a *lagAdmin) CreatePartition(_ context.Context, _, _, p string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failWith != nil {
		return a.failWith
	}
	if a.drop > 0 {
		a.drop-- // lost: the caller sees success, the store never got it
		return nil
	}
	if a.created[p] {
		return fmt.Errorf("partition %s: %w", p, core.ErrNodeExists)
	}
	a.created[p] = true
	return nil
}

func (a *lagAdmin) ListPartitionInfos(context.Context, string, string) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lag > 0 {
		a.lag--
		return a.shown, nil
	}
	a.shown = len(a.created)
	return a.shown, nil
}

type adminRig struct{ a AdminAPI }

func (r adminRig) ImageGetTable(string, string) error { return nil }
func (r adminRig) ImageGetNode(string, string) error  { return nil }
func (r adminRig) Admin() AdminAPI                    { return r.a }
func (r adminRig) Close() error                       { return nil }

// TestListPartitionsSetupWaitsAndRetries: the setup of the 1000-partition
// row waits for a lagging listing and fills partitions an earlier round
// lost, instead of declaring the row unavailable; a create that fails is
// still reported.
func TestListPartitionsSetupWaitsAndRetries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := plan{partitions: 100, batch: 100}
	a := &lagAdmin{created: map[string]bool{}, lag: 5, drop: 7}
	s := &System{Name: "lag-" + t.Name(), Coordinator: adminRig{a}}
	w, err := prepareListPartitions(ctx, s, p)
	if err != nil {
		t.Fatalf("setup gave up: %v", err)
	}
	if len(a.created) != 100 || w == nil {
		t.Fatalf("%d partitions created, want 100", len(a.created))
	}

	bad := &lagAdmin{created: map[string]bool{}, failWith: fmt.Errorf("disk full")}
	_, err = prepareListPartitions(ctx, &System{Name: "bad-" + t.Name(), Coordinator: adminRig{bad}}, p)
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("a failing create: %v, want its error", err)
	}
}
