package core

import (
	"context"
	"fmt"
	"sync"
)

// BlockAllocator hands out ids from blocks reserved with AllocateIDs, so
// that one write serves blockSize ids. A block not used up when the
// leadership that reserved it ends is dropped (gaps are allowed, reuse is
// not): call Reset on leadership loss, or build a new allocator per
// leadership.
//
// It is safe for concurrent use.
type BlockAllocator struct {
	backend   MetadataBackend
	path      string
	blockSize int64

	mu    sync.Mutex
	next  int64 // next id to hand out
	limit int64 // end of the current block (exclusive)
	fence Fence
}

// NewBlockAllocator returns an allocator for the counter at path that
// reserves blockSize ids at a time (at least 1).
func NewBlockAllocator(b MetadataBackend, path string, blockSize int64) *BlockAllocator {
	if blockSize < 1 {
		blockSize = 1
	}
	return &BlockAllocator{backend: b, path: path, blockSize: blockSize}
}

// Next returns n contiguous ids [first, first+n) under fence. A request
// larger than what is left of the block reserves a new block of
// max(blockSize, n) and drops the rest of the old one. A change of fence
// drops the current block. Errors: as AllocateIDs.
func (a *BlockAllocator) Next(ctx context.Context, n int64, fence Fence) (int64, error) {
	if n < 1 {
		return 0, fmt.Errorf("%w: allocate %d ids: count must be at least 1", ErrInvalidArgument, n)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fence != fence {
		a.next, a.limit, a.fence = 0, 0, fence
	}
	if a.limit-a.next < n {
		size := a.blockSize
		if n > size {
			size = n
		}
		first, err := AllocateIDs(ctx, a.backend, a.path, size, fence)
		if err != nil {
			return 0, err
		}
		a.next, a.limit = first, first+size
	}
	first := a.next
	a.next += n
	return first, nil
}

// Reset drops the current block; the next call reserves a new one.
func (a *BlockAllocator) Reset() {
	a.mu.Lock()
	a.next, a.limit = 0, 0
	a.mu.Unlock()
}
