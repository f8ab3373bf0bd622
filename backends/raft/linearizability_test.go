package raft

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

type regInput struct {
	write bool
	value string
}

// registerModel is a single register: writes set it, reads return it.
var registerModel = porcupine.Model{
	Init: func() interface{} { return "0" },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		in := input.(regInput)
		if in.write {
			return true, in.value
		}
		return output.(string) == state.(string), state
	},
	DescribeOperation: func(input, output interface{}) string {
		in := input.(regInput)
		if in.write {
			return "write " + in.value
		}
		return fmt.Sprintf("read -> %v", output)
	},
}

// TestLinearizableRegister: clients on all three voters read (ReadIndex,
// followers included) and write one node while Raft leadership moves
// around; porcupine checks that the history is linearizable. Writes whose
// outcome is unknown (ErrUnavailable, timeouts) may take effect at any
// time after their call.
func TestLinearizableRegister(t *testing.T) {
	c := startCluster(t, 3, nil)
	ctx := testutil.Context(t, 20*time.Second)
	clients := []*Client{c.client(0), c.client(1), c.client(2), c.client(0), c.client(1), c.client(2)}
	if _, _, err := core.Create(ctx, clients[0], "/reg", []byte("0"), core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	now := func() int64 { return time.Since(start).Nanoseconds() }
	var mu sync.Mutex
	var history []porcupine.Operation
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for id, cl := range clients {
		wg.Add(1)
		go func(id int, cl *Client) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(id)))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				op := porcupine.Operation{ClientId: id}
				octx, cancel := context.WithTimeout(ctx, 2*time.Second)
				if rng.Intn(2) == 0 {
					v := fmt.Sprintf("%d-%d", id, i)
					op.Input = regInput{write: true, value: v}
					op.Call = now()
					_, err := core.Set(octx, cl, "/reg", []byte(v), core.AnyVersion, core.Fence{})
					op.Return = now()
					if err != nil {
						op.Return = math.MaxInt64 // unknown outcome
					}
				} else {
					op.Input = regInput{}
					op.Call = now()
					n, err := core.Get(octx, cl, "/reg")
					op.Return = now()
					if err != nil {
						cancel()
						continue // a failed read has no effect
					}
					op.Output = string(n.Data)
				}
				cancel()
				mu.Lock()
				history = append(history, op)
				mu.Unlock()
			}
		}(id, cl)
	}
	for round := 0; round < 8; round++ {
		time.Sleep(250 * time.Millisecond)
		if l := c.leader(); l >= 0 {
			_ = c.members[l].m.nh.RequestLeaderTransfer(shardID, uint64((l+1)%3+1))
		}
	}
	close(stop)
	wg.Wait()
	res := porcupine.CheckOperationsTimeout(registerModel, history, 60*time.Second)
	if res == porcupine.Illegal {
		t.Fatalf("history of %d operations is not linearizable", len(history))
	}
	if res != porcupine.Ok {
		t.Fatalf("linearizability check inconclusive (%s) for %d operations", res, len(history))
	}
	t.Logf("%d operations linearizable across leader changes", len(history))
}
