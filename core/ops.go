package core

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Get reads one node. Errors: as GetMany, plus ErrNotFound and
// ErrInvalidPath for the path.
func Get(ctx context.Context, b Reader, path string) (Node, error) {
	res, err := b.GetMany(ctx, []string{path}, ReadOptions{})
	if err != nil {
		return Node{}, err
	}
	if len(res) != 1 {
		return Node{}, fmt.Errorf("%w: backend returned %d results for 1 path", ErrUnavailable, len(res))
	}
	return res[0].Node, res[0].Err
}

// Exists reports whether path exists and, if so, its stat. Errors: as
// GetMany, plus ErrInvalidPath.
func Exists(ctx context.Context, b Reader, path string) (Stat, bool, error) {
	res, err := b.GetMany(ctx, []string{path}, ReadOptions{NoData: true})
	if err != nil {
		return Stat{}, false, err
	}
	if len(res) != 1 {
		return Stat{}, false, fmt.Errorf("%w: backend returned %d results for 1 path", ErrUnavailable, len(res))
	}
	if errors.Is(res[0].Err, ErrNotFound) {
		return Stat{}, false, nil
	}
	if res[0].Err != nil {
		return Stat{}, false, res[0].Err
	}
	return res[0].Node.Stat, true, nil
}

// CreateOptions are the options of Create.
type CreateOptions struct {
	Mode        CreateMode
	MakeParents bool
	Fence       Fence
	Lease       int64
}

// Create creates one node and returns its actual path (with the suffix for
// a sequential mode) and stat. Errors: as Txn, unwrapped from the TxnError
// so errors.Is sees the sentinel either way.
func Create(ctx context.Context, b Writer, path string, data []byte, opts CreateOptions) (string, Stat, error) {
	op := CreateOp(path, data, opts.Mode)
	op.MakeParents = opts.MakeParents
	op.Lease = opts.Lease
	res, err := b.Txn(ctx, []Op{op}, TxnOptions{Fence: opts.Fence})
	if err != nil {
		return "", Stat{}, singleOpError(err)
	}
	r := res.Results[0]
	return r.Path, r.Stat, nil
}

// Set replaces path's data if its version is version (AnyVersion: any) and
// returns the new stat. Errors: as Txn.
func Set(ctx context.Context, b Writer, path string, data []byte, version int64, fence Fence) (Stat, error) {
	res, err := b.Txn(ctx, []Op{SetOp(path, data, version)}, TxnOptions{Fence: fence})
	if err != nil {
		return Stat{}, singleOpError(err)
	}
	return res.Results[0].Stat, nil
}

// Delete deletes path if its version is version (AnyVersion: any). A node
// with children is refused with ErrNotEmpty. Errors: as Txn.
func Delete(ctx context.Context, b Writer, path string, version int64, fence Fence) error {
	_, err := b.Txn(ctx, []Op{DeleteOp(path, version)}, TxnOptions{Fence: fence})
	return singleOpError(err)
}

// singleOpError drops the TxnError wrapper of a one-op transaction, keeping
// the op's error (which still wraps its sentinel).
func singleOpError(err error) error {
	var te *TxnError
	if errors.As(err, &te) && te.Index == 0 {
		return te.Err
	}
	return err
}

// EncodeCounter encodes a counter value in the original system's format: an
// 8-byte big-endian signed integer.
func EncodeCounter(v int64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, uint64(v))
	return b
}

// DecodeCounter decodes a counter value written by EncodeCounter. Empty data
// reads as 0.
func DecodeCounter(b []byte) (int64, error) {
	switch len(b) {
	case 0:
		return 0, nil
	case 8:
		return int64(binary.BigEndian.Uint64(b)), nil
	}
	return 0, fmt.Errorf("%w: counter value has %d bytes, want 8", ErrInvalidArgument, len(b))
}

// AllocateIDs reserves [first, first+n) from the counter node at path. It
// uses the backend's IDAllocator when it has one; otherwise it reads the
// counter and sets it with the version it read, retrying on ErrBadVersion
// (creating the counter at 0 if missing). Ranges never overlap, and the
// counter never wraps: a range that would pass math.MaxInt64 is refused
// with ErrTooLarge and nothing is reserved. Errors: ErrInvalidArgument,
// ErrTooLarge, ErrFenced, ErrNotLeader, ErrUnavailable, ErrClosed,
// context errors.
func AllocateIDs(ctx context.Context, b MetadataBackend, path string, n int64, fence Fence) (int64, error) {
	if n < 1 {
		return 0, fmt.Errorf("%w: allocate %d ids from %s: count must be at least 1", ErrInvalidArgument, n, path)
	}
	if a, ok := Optional[IDAllocator](b); ok {
		return a.AllocateIDs(ctx, path, n, fence)
	}
	if err := ValidatePath(path); err != nil {
		return 0, err
	}
	for {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		node, err := Get(ctx, b, path)
		if errors.Is(err, ErrNotFound) {
			_, _, err = Create(ctx, b, path, EncodeCounter(0), CreateOptions{MakeParents: true, Fence: fence})
			if err != nil && !errors.Is(err, ErrNodeExists) {
				return 0, err
			}
			continue
		}
		if err != nil {
			return 0, err
		}
		next, err := DecodeCounter(node.Data)
		if err != nil {
			return 0, fmt.Errorf("counter %s: %w", path, err)
		}
		if next < 0 || next > math.MaxInt64-n {
			return 0, fmt.Errorf("%w: counter %s at %d: %d more ids would pass the largest id, %d", ErrTooLarge, path, next, n, int64(math.MaxInt64))
		}
		_, err = Set(ctx, b, path, EncodeCounter(next+n), node.Stat.Version, fence)
		if errors.Is(err, ErrBadVersion) {
			continue
		}
		if err != nil {
			return 0, err
		}
		return next, nil
	}
}
