// Package deadline tells whether a context has ended, counting a
// deadline that has passed before the context's own timer fired.
package deadline

import (
	"context"
	"time"
)

// Err is ctx.Err(), or context.DeadlineExceeded once ctx's deadline has
// passed although its timer has not fired yet. A gRPC server enforces
// the deadline it was sent too, and on a loaded machine its reset of the
// stream (a CANCEL) can reach the caller before the caller's own timer
// runs: the call then failed because its deadline passed, not because
// the server chose to cancel it.
func Err(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}
