package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/image"
)

// TestImageKeepsOwnWritesUnderLoad is the coordinator's arrangement on
// this backend: a catalog writing through the backend, reading from an
// image fed by the backend's watch and by its own writes (OnWrite). Three
// writers create and drop their own tables over and over; after each
// acknowledged create or drop, the image must show it at once and keep
// showing it while the watch delivers the other writers' changes. A watch
// that stamped an event with a revision it had not delivered, or a
// transaction revision lower than what the watch had already passed, let a
// dropped table come back for a while (a stale read after an acknowledged
// drop).
func TestImageKeepsOwnWritesUnderLoad(t *testing.T) {
	b := open(t, testOptions(t))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	img := image.New(image.Options{Prefix: "/"})
	runCtx, stop := context.WithCancel(ctx)
	var runWG sync.WaitGroup
	runWG.Add(1)
	go func() { defer runWG.Done(); _ = img.Run(runCtx, b) }()
	defer func() { stop(); runWG.Wait() }()
	if err := img.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	cat := catalog.New(b, catalog.Options{Reader: img, OnWrite: img.ApplyWrite, IDBlockSize: 5})
	if _, err := cat.CreateDatabase(ctx, "db", catalog.DatabaseRegistration{}, false); err != nil {
		t.Fatal(err)
	}
	spec := catalog.TableSpec{Schema: catalog.Schema{Columns: []catalog.Column{
		{Name: "id", Type: catalog.DataType{Type: "BIGINT", Nullable: true}},
	}, PrimaryKey: []string{"id"}}, BucketCount: 3}

	// check reads name from the image now and after each of the next few
	// changes the image applies (bounded: a quiet image ends it early).
	check := func(name string, want bool) error {
		for i := 0; i < 4; i++ {
			ch := img.Changed()
			_, err := cat.GetTable(ctx, "db", name)
			var nf *catalog.NotFoundError
			switch {
			case err == nil && !want:
				return fmt.Errorf("table %s read back after its drop was acknowledged (look %d)", name, i)
			case errors.As(err, &nf) && want:
				return fmt.Errorf("table %s not found after its create was acknowledged (look %d)", name, i)
			case err != nil && !errors.As(err, &nf):
				return err
			}
			select {
			case <-ch:
			case <-time.After(100 * time.Millisecond):
				return nil
			}
		}
		return nil
	}
	const writers, rounds = 3, 40
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				name := fmt.Sprintf("t%d_%d", w, r%2)
				if _, err := cat.CreateTable(ctx, "db", name, spec, false); err != nil {
					errs <- fmt.Errorf("writer %d round %d: create %s: %w", w, r, name, err)
					return
				}
				if err := check(name, true); err != nil {
					errs <- fmt.Errorf("writer %d round %d: %w", w, r, err)
					return
				}
				if _, err := cat.DropTable(ctx, "db", name, false); err != nil {
					errs <- fmt.Errorf("writer %d round %d: drop %s: %w", w, r, name, err)
					return
				}
				if err := check(name, false); err != nil {
					errs <- fmt.Errorf("writer %d round %d: %w", w, r, err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
