package ports

import (
	"sync"
	"testing"
)

func TestFreeNeverRepeats(t *testing.T) {
	const n = 200
	var (
		mu   sync.Mutex
		seen = map[int]bool{}
		wg   sync.WaitGroup
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := Free()
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if seen[p] {
				t.Errorf("port %d handed out twice", p)
			}
			seen[p] = true
		}()
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("got %d distinct ports, want %d", len(seen), n)
	}
}
