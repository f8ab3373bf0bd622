package raft

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the tests leave no goroutine of ours behind (closing
// a provider stops its NodeHost, state machine and client goroutines).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
