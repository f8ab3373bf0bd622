package deadline

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestErr(t *testing.T) {
	if err := Err(context.Background()); err != nil {
		t.Fatalf("a context without deadline: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if err := Err(ctx); err != nil {
		t.Fatalf("a deadline an hour away: %v", err)
	}
	// A deadline that has passed while the context reports no error yet
	// (as a timer context does until its timer runs).
	if err := Err(passed{context.Background()}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a passed deadline before the timer fired: %v, want DeadlineExceeded", err)
	}
	cancel()
	if err := Err(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled context: %v", err)
	}
}

// passed reports a deadline a second ago and no error, as a timer context
// does between its deadline and its timer's firing.
type passed struct{ context.Context }

func (passed) Deadline() (time.Time, bool) { return time.Now().Add(-time.Second), true }
