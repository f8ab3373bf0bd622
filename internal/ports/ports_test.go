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

// TestFreeBelowTheEphemeralRange: where the kernel's ephemeral range leaves
// room below it, the ports handed out are there, where no outgoing
// connection takes them.
func TestFreeBelowTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	room := low-1-lowest >= 1000
	for i := 0; i < 20; i++ {
		p, err := Free()
		if err != nil {
			t.Fatal(err)
		}
		if room && (p < lowest || p >= low) {
			t.Fatalf("port %d, want one in [%d, %d)", p, lowest, low)
		}
		if p <= 0 || p > 65535 {
			t.Fatalf("port %d", p)
		}
	}
}
