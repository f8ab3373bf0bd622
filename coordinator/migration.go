package coordinator

import (
	"context"
	"errors"
	"time"

	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/image"
	"github.com/metaplane/metaplane/internal/retry"
)

// The migration fence (catalog.MigrationFencePath) is set by a live
// migration (package migrate) on its source once the copy is nearly done,
// and on its target until the copy is complete. While it exists a
// coordinator does not lead the store: it does not campaign, a coordinator
// elected meanwhile resigns before serving, and a leader that sees the
// fence appear in its image resigns (its writes are refused from then on,
// its fence being stale). docs/migration.md describes the procedure.

// fencedByMigration reports whether r holds the migration fence. A read
// error is not a fence (the election and the image decide then).
func fencedByMigration(ctx context.Context, r core.Reader, opts core.ReadOptions) bool {
	rs, err := r.GetMany(ctx, []string{catalog.MigrationFencePath}, opts)
	return err == nil && len(rs) == 1 && rs[0].Err == nil
}

// waitMigrationUnfenced blocks while b holds the migration fence, checking
// every second; it returns false when ctx ended or the server is failing.
func (s *Server) waitMigrationUnfenced(ctx context.Context, b core.MetadataBackend) bool {
	logged := false
	for fencedByMigration(ctx, b, core.ReadOptions{Stale: true}) {
		if !logged {
			s.log.Warn("the store carries the migration fence: not campaigning until it is removed (a live migration moved the cluster to another store, or runs on this one as its target; metaplane migrate unfence removes it)",
				"fence", catalog.MigrationFencePath)
			logged = true
		}
		if !retry.Sleep(ctx, time.Second, s.opts.Fatal) {
			return false
		}
	}
	if logged {
		s.log.Info("the migration fence is gone: campaigning", "fence", catalog.MigrationFencePath)
	}
	return ctx.Err() == nil
}

// resignOnMigrationFence resigns lead as soon as img shows the migration
// fence; it returns when ctx ends or the leadership is lost.
func (s *Server) resignOnMigrationFence(ctx context.Context, img *image.Image, lead core.Leadership) {
	for {
		ch := img.Changed()
		if fencedByMigration(ctx, img, core.ReadOptions{}) {
			s.log.Warn("the migration fence appeared: resigning the leadership (a live migration fences this store)",
				"fence", catalog.MigrationFencePath, "epoch", lead.Epoch())
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := lead.Resign(rctx); err != nil && !errors.Is(err, context.Canceled) {
				s.log.Warn("resign on the migration fence did not complete", "err", err)
			}
			cancel()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-lead.Lost():
			return
		case <-ch:
		}
	}
}
