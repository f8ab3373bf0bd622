package testutil

import (
	"context"
	"testing"
	"time"
)

// Context is a context that ends after d or when the test ends.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
