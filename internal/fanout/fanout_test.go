package fanout

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitTimeout bounds every wait for something that must happen.
const waitTimeout = 5 * time.Second

// drain reads ch until it is empty right now (not closed).
func drain[T any](t *testing.T, ch <-chan T) []T {
	t.Helper()
	var got []T
	for {
		select {
		case v, ok := <-ch:
			if !ok {
				t.Fatalf("channel closed after %v, want it open", got)
			}
			got = append(got, v)
		default:
			return got
		}
	}
}

// waitClosed waits until ch is closed, returning what it still held.
func waitClosed[T any](t *testing.T, ch <-chan T) []T {
	t.Helper()
	var got []T
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	for {
		select {
		case v, ok := <-ch:
			if !ok {
				return got
			}
			got = append(got, v)
		case <-timer.C:
			t.Fatalf("channel not closed within %v (received %v)", waitTimeout, got)
		}
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestDeliversInOrder(t *testing.T) {
	var h Hub[int]
	defer h.Close()
	a := h.Subscribe(context.Background(), 8)
	b := h.Subscribe(context.Background(), 8)
	for i := 1; i <= 5; i++ {
		h.Publish(i)
	}
	want := []int{1, 2, 3, 4, 5}
	for name, ch := range map[string]<-chan int{"a": a, "b": b} {
		if got := drain(t, ch); !equal(got, want) {
			t.Errorf("subscriber %s: got %v, want %v", name, got, want)
		}
	}
}

func TestSlowSubscriberLosesOldestKeepsLatest(t *testing.T) {
	tests := []struct {
		name    string
		buffer  int
		publish int
		want    []int
	}{
		{name: "buffer 3", buffer: 3, publish: 10, want: []int{8, 9, 10}},
		{name: "buffer 1 is latest wins", buffer: 1, publish: 10, want: []int{10}},
		{name: "buffer 0 counts as 1", buffer: 0, publish: 4, want: []int{4}},
		{name: "not full loses nothing", buffer: 16, publish: 4, want: []int{1, 2, 3, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Hub[int]
			defer h.Close()
			ch := h.Subscribe(context.Background(), tt.buffer)
			fast := h.Subscribe(context.Background(), tt.publish)
			for i := 1; i <= tt.publish; i++ {
				h.Publish(i)
			}
			if got := drain(t, ch); !equal(got, tt.want) {
				t.Errorf("slow subscriber: got %v, want %v", got, tt.want)
			}
			// One slow subscriber costs the others nothing.
			if got := drain(t, fast); len(got) != tt.publish {
				t.Errorf("subscriber with room: got %d values %v, want all %d", len(got), got, tt.publish)
			}
		})
	}
}

func TestInitialValuesComeFirst(t *testing.T) {
	var h Hub[int]
	defer h.Close()
	h.Publish(-1) // before the subscription: not delivered
	ch := h.Subscribe(context.Background(), 4, 10, 11)
	h.Publish(12)
	if got, want := drain(t, ch), []int{10, 11, 12}; !equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	// More initial values than the buffer holds: the latest are kept.
	ch2 := h.Subscribe(context.Background(), 2, 1, 2, 3)
	if got, want := drain(t, ch2), []int{2, 3}; !equal(got, want) {
		t.Errorf("initial values beyond the buffer: got %v, want %v", got, want)
	}
}

func TestCloseClosesEverySubscriber(t *testing.T) {
	var h Hub[int]
	a := h.Subscribe(context.Background(), 4)
	b := h.Subscribe(context.Background(), 4)
	h.Publish(1)
	h.Close()
	h.Close() // idempotent
	h.Publish(2)
	for name, ch := range map[string]<-chan int{"a": a, "b": b} {
		if got, want := waitClosed(t, ch), []int{1}; !equal(got, want) {
			t.Errorf("subscriber %s: got %v before the close, want %v", name, got, want)
		}
	}
	if n := h.Len(); n != 0 {
		t.Errorf("Len after Close: got %d, want 0", n)
	}
	late := h.Subscribe(context.Background(), 4, 7)
	if got := waitClosed(t, late); len(got) != 0 {
		t.Errorf("subscription after Close: got %v, want a closed, empty channel", got)
	}
}

func TestCloseWithDeliversTheLastValueEvenToASlowSubscriber(t *testing.T) {
	var h Hub[int]
	ch := h.Subscribe(context.Background(), 2)
	h.Publish(1)
	h.Publish(2)
	h.CloseWith(99)
	h.CloseWith(100) // no effect after the first
	if got, want := waitClosed(t, ch), []int{2, 99}; !equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestContextEndUnsubscribes(t *testing.T) {
	var h Hub[int]
	defer h.Close()
	ctx, cancel := context.WithCancel(context.Background())
	gone := h.Subscribe(ctx, 4)
	stays := h.Subscribe(context.Background(), 4)
	h.Publish(1)
	cancel()
	if got, want := waitClosed(t, gone), []int{1}; !equal(got, want) {
		t.Errorf("cancelled subscriber: got %v, want %v", got, want)
	}
	if n := h.Len(); n != 1 {
		t.Errorf("Len after one subscriber's ctx ended: got %d, want 1", n)
	}
	h.Publish(2)
	if got, want := drain(t, stays), []int{1, 2}; !equal(got, want) {
		t.Errorf("other subscriber: got %v, want %v", got, want)
	}
}

func TestEndedContextGivesAClosedChannel(t *testing.T) {
	var h Hub[int]
	defer h.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ch := h.Subscribe(ctx, 4, 1)
	if got := waitClosed(t, ch); len(got) != 0 {
		t.Errorf("got %v, want a closed, empty channel", got)
	}
	if n := h.Len(); n != 0 {
		t.Errorf("Len: got %d, want 0", n)
	}
}

func TestNoGoroutinePerSubscriber(t *testing.T) {
	const n = 1000
	var h Hub[int]
	defer h.Close()
	before := runtime.NumGoroutine()
	cancels := make([]context.CancelFunc, n)
	chans := make([]<-chan int, n)
	for i := range n {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		chans[i] = h.Subscribe(ctx, 1)
	}
	h.Publish(1)
	// A goroutine per subscriber would add n; allow a few for the runtime.
	if after := runtime.NumGoroutine(); after > before+10 {
		t.Fatalf("goroutines: %d before %d subscriptions, %d after; want no goroutine per subscriber", before, n, after)
	}
	if got := h.Len(); got != n {
		t.Fatalf("Len: got %d, want %d", got, n)
	}
	for _, cancel := range cancels {
		cancel()
	}
	for i, ch := range chans {
		if got := waitClosed(t, ch); !equal(got, []int{1}) {
			t.Fatalf("subscriber %d: got %v, want [1]", i, got)
		}
	}
	if got := h.Len(); got != 0 {
		t.Fatalf("Len after every ctx ended: got %d, want 0", got)
	}
}

// TestConcurrentPublishSubscribeClose races publishers, subscribers that
// come and go, slow readers and Close (run it with -race). A send on a
// closed channel would panic; every subscriber must see each publisher's
// values in order, and a subscriber that stays to the end must receive
// the final value.
func TestConcurrentPublishSubscribeClose(t *testing.T) {
	type val struct{ pub, seq int }
	const (
		publishers  = 4
		perPub      = 2000
		subscribers = 16
	)
	var h Hub[val]
	var wg sync.WaitGroup

	// checkOrder reads ch until it closes, failing on a value of a
	// publisher that is not newer than the last one seen from it; it
	// returns the last value seen of each publisher.
	checkOrder := func(ch <-chan val, slow bool) [publishers]int {
		var last [publishers]int
		for v := range ch {
			if v.seq <= last[v.pub] {
				t.Errorf("publisher %d: got seq %d after %d", v.pub, v.seq, last[v.pub])
			}
			last[v.pub] = v.seq
			if slow {
				runtime.Gosched()
			}
		}
		return last
	}

	// Subscribers that stay until Close.
	stayers := make([]<-chan val, subscribers)
	for i := range stayers {
		stayers[i] = h.Subscribe(context.Background(), 1+i%4)
	}
	lasts := make([][publishers]int, subscribers)
	for i, ch := range stayers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lasts[i] = checkOrder(ch, i%2 == 0)
		}()
	}

	// Subscribers that come and go while values flow.
	stopChurn := make(chan struct{})
	var churn sync.WaitGroup
	for i := range subscribers {
		churn.Add(1)
		go func() {
			defer churn.Done()
			for {
				select {
				case <-stopChurn:
					return
				default:
				}
				ctx, cancel := context.WithCancel(context.Background())
				ch := h.Subscribe(ctx, 1+i%3)
				done := make(chan struct{})
				go func() { defer close(done); checkOrder(ch, false) }()
				runtime.Gosched()
				cancel()
				<-done
			}
		}()
	}

	var pubs sync.WaitGroup
	for p := range publishers {
		pubs.Add(1)
		go func() {
			defer pubs.Done()
			for s := 1; s <= perPub; s++ {
				h.Publish(val{pub: p, seq: s})
			}
		}()
	}
	pubs.Wait()

	// Every stayer must get the latest value however slow it is: a final
	// one published by CloseWith while the churn goes on.
	h.CloseWith(val{pub: 0, seq: perPub + 1})
	close(stopChurn)
	churn.Wait()
	wg.Wait()
	for i, last := range lasts {
		if last[0] != perPub+1 {
			t.Errorf("stayer %d: last value of publisher 0 is %d, want the final %d", i, last[0], perPub+1)
		}
	}
	// Close raced with churning subscribers: any subscription made after
	// it must come back closed.
	if got := waitClosed(t, h.Subscribe(context.Background(), 1)); len(got) != 0 {
		t.Errorf("subscription after Close: got %v, want closed and empty", got)
	}
}

// TestLatestIsAlwaysDeliveredToASlowReader publishes faster than the
// reader reads and checks that the reader ends with the last value.
func TestLatestIsAlwaysDeliveredToASlowReader(t *testing.T) {
	const n = 5000
	var h Hub[int]
	defer h.Close()
	ch := h.Subscribe(context.Background(), 2)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i <= n; i++ {
			h.Publish(i)
		}
	}()
	last := 0
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	for last != n {
		select {
		case v := <-ch:
			if v <= last {
				t.Fatalf("got %d after %d", v, last)
			}
			last = v
			runtime.Gosched()
		case <-timer.C:
			t.Fatalf("last value received %d within %v, want %d", last, waitTimeout, n)
		}
	}
	<-done
	if got := drain(t, ch); len(got) != 0 {
		t.Errorf("values after the latest: %v", got)
	}
}
