package retry

import (
	"context"
	"testing"
	"time"
)

func TestBackoffGrowsCappedWithJitter(t *testing.T) {
	b := New(100*time.Millisecond, time.Second)
	var waits []time.Duration
	for i := 0; i < 12; i++ {
		waits = append(waits, b.Next())
	}
	if w := waits[0]; w < 50*time.Millisecond || w > 150*time.Millisecond {
		t.Errorf("first wait %v, want 100ms ±50%%", w)
	}
	for i, w := range waits {
		if w > 1500*time.Millisecond {
			t.Errorf("wait %d is %v, above the cap 1s plus its jitter", i, w)
		}
	}
	if w := waits[2]; w < 200*time.Millisecond || w > 600*time.Millisecond {
		t.Errorf("third wait %v, want 400ms ±50%% (doubling)", w)
	}
	if waits[8] < 500*time.Millisecond {
		t.Errorf("wait 8 is %v: the waits do not grow to the cap", waits[8])
	}
	distinct := map[time.Duration]bool{}
	for _, w := range waits[6:] {
		distinct[w] = true
	}
	if len(distinct) < 2 {
		t.Errorf("capped waits %v are all equal: no jitter", waits[6:])
	}
	b.Reset()
	if w := b.Next(); w > 150*time.Millisecond {
		t.Errorf("after Reset: %v, want about the initial 100ms", w)
	}
}

func TestNth(t *testing.T) {
	for _, tt := range []struct {
		n      int
		center time.Duration
	}{
		{0, 100 * time.Millisecond},
		{1, 100 * time.Millisecond},
		{2, 200 * time.Millisecond},
		{4, 800 * time.Millisecond},
		{5, time.Second}, // 1.6s, capped
		{40, time.Second},
		{1000, time.Second},
	} {
		seen := map[time.Duration]bool{}
		for i := 0; i < 20; i++ {
			w := Nth(100*time.Millisecond, time.Second, tt.n)
			if w < tt.center/2 || w > tt.center*3/2 {
				t.Errorf("Nth(%d) = %v, want %v ±50%%", tt.n, w, tt.center)
			}
			seen[w] = true
		}
		if len(seen) < 2 {
			t.Errorf("Nth(%d) always %v: no jitter", tt.n, seen)
		}
	}
}

func TestSleepEndsEarly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep waited the whole hour on a cancelled context")
	}
	stop := make(chan struct{})
	close(stop)
	if Sleep(context.Background(), time.Hour, nil, stop) {
		t.Fatal("Sleep waited the whole hour with a closed stop channel")
	}
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("Sleep of 1ms did not report the whole wait")
	}
}
