package fsm

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/cockroachdb/pebble/v2"
	sm "github.com/lni/dragonboat/v4/statemachine"

	"github.com/metaplane/metaplane/internal/protocodec"
	raftv1 "github.com/metaplane/metaplane/proto/metaplane/raft/v1"
)

// The state machine's snapshot format:
//
//	magic        8 bytes "MPRAFTS1"
//	header       uvarint length + SnapshotHeader (format, applied index,
//	             number of records, SHA-256 of the body)
//	body         records: uvarint key length, key, uvarint value length,
//	             value; every key of the store, in key order
//
// Saving walks the Pebble snapshot twice (checksum, then write) so the
// header can come first; recovering copies the stream to a temporary file
// while hashing it and touches the store only once the checksum matched.
const snapshotMagic = "MPRAFTS1"

const snapshotFormat = 1

// ErrSnapshotCorrupt is returned (and the snapshot refused) when a snapshot's
// content does not match its checksum or cannot be decoded.
var ErrSnapshotCorrupt = errors.New("raft: snapshot is corrupt")

func walkStore(r reader, fn func(k, v []byte) error) error {
	it, err := r.NewIter(&pebble.IterOptions{})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		if err := fn(it.Key(), it.Value()); err != nil {
			return err
		}
	}
	return it.Error()
}

func putRecord(w io.Writer, k, v []byte) error {
	var buf [2 * binary.MaxVarintLen64]byte
	n := binary.PutUvarint(buf[:], uint64(len(k)))
	if _, err := w.Write(buf[:n]); err != nil {
		return err
	}
	if _, err := w.Write(k); err != nil {
		return err
	}
	n = binary.PutUvarint(buf[:], uint64(len(v)))
	if _, err := w.Write(buf[:n]); err != nil {
		return err
	}
	_, err := w.Write(v)
	return err
}

func writeSnapshot(r reader, w io.Writer, stopc <-chan struct{}) error {
	applied, err := readApplied(r)
	if err != nil {
		return err
	}
	h := sha256.New()
	cw := &countingWriter{w: h}
	var count uint64
	if err := walkStore(r, func(k, v []byte) error {
		count++
		return putRecord(cw, k, v)
	}); err != nil {
		return err
	}
	hdr := MustMarshal(&raftv1.SnapshotHeader{Format: snapshotFormat, AppliedIndex: applied, Entries: count,
		Sha256: h.Sum(nil), BodyBytes: cw.n})
	bw := bufio.NewWriterSize(w, 64<<10)
	if _, err := bw.WriteString(snapshotMagic); err != nil {
		return err
	}
	var lb [binary.MaxVarintLen64]byte
	if _, err := bw.Write(lb[:binary.PutUvarint(lb[:], uint64(len(hdr)))]); err != nil {
		return err
	}
	if _, err := bw.Write(hdr); err != nil {
		return err
	}
	var n uint64
	if err := walkStore(r, func(k, v []byte) error {
		n++
		if n%1024 == 0 {
			select {
			case <-stopc:
				return sm.ErrSnapshotStopped
			default:
			}
		}
		return putRecord(bw, k, v)
	}); err != nil {
		return err
	}
	return bw.Flush()
}

func readHeader(r *bufio.Reader) (*raftv1.SnapshotHeader, error) {
	magic := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != snapshotMagic {
		return nil, fmt.Errorf("%w: bad magic", ErrSnapshotCorrupt)
	}
	l, err := binary.ReadUvarint(r)
	if err != nil || l > 1<<16 {
		return nil, fmt.Errorf("%w: bad header length", ErrSnapshotCorrupt)
	}
	b := make([]byte, l)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("%w: short header", ErrSnapshotCorrupt)
	}
	var hdr raftv1.SnapshotHeader
	if err := protocodec.Unmarshal(b, &hdr); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrSnapshotCorrupt, err)
	}
	if hdr.GetFormat() != snapshotFormat {
		return nil, fmt.Errorf("%w: unknown format %d", ErrSnapshotCorrupt, hdr.GetFormat())
	}
	return &hdr, nil
}

// verifySnapshot copies the snapshot in r to tmp, checking the body against
// the header's checksum.
func verifySnapshot(r io.Reader, tmp io.Writer) (*raftv1.SnapshotHeader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	hdr, err := readHeader(br)
	if err != nil {
		return nil, err
	}
	// Read exactly the body the header announces: the reader Dragonboat
	// hands over is not required to end cleanly at the payload's end.
	h := sha256.New()
	if _, err := io.CopyN(io.MultiWriter(tmp, h), br, int64(hdr.GetBodyBytes())); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: the body is shorter than the %d bytes the header announces", ErrSnapshotCorrupt, hdr.GetBodyBytes())
		}
		return nil, fmt.Errorf("raft: read snapshot: %w", err)
	}
	if sum := h.Sum(nil); !bytes.Equal(sum, hdr.GetSha256()) {
		return nil, fmt.Errorf("%w: SHA-256 of the body is %x, the header says %x (snapshot at index %d refused; nothing was applied)",
			ErrSnapshotCorrupt, sum, hdr.GetSha256(), hdr.GetAppliedIndex())
	}
	return hdr, nil
}

// loadSnapshot replaces the store's content with the verified body in r, in
// one synced batch.
func loadSnapshot(db *pebble.DB, hdr *raftv1.SnapshotHeader, r io.Reader, stopc <-chan struct{}) error {
	br := bufio.NewReaderSize(r, 64<<10)
	b := db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange([]byte{0}, []byte{0xff}, nil); err != nil {
		return err
	}
	var n uint64
	for {
		k, err := readChunk(br)
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		v, err := readChunk(br)
		if err != nil {
			if err == io.EOF {
				err = fmt.Errorf("%w: truncated record", ErrSnapshotCorrupt)
			}
			return err
		}
		if err := b.Set(k, v, nil); err != nil {
			return err
		}
		n++
		if n%4096 == 0 {
			select {
			case <-stopc:
				return sm.ErrSnapshotStopped
			default:
			}
		}
	}
	if n != hdr.GetEntries() {
		return fmt.Errorf("%w: %d records, the header says %d", ErrSnapshotCorrupt, n, hdr.GetEntries())
	}
	if err := b.Set(keyApplied, u64(hdr.GetAppliedIndex()), nil); err != nil {
		return err
	}
	return b.Commit(pebble.Sync)
}

type countingWriter struct {
	w io.Writer
	n uint64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += uint64(n)
	return n, err
}

func readChunk(r *bufio.Reader) ([]byte, error) {
	l, err := binary.ReadUvarint(r)
	if err == io.EOF {
		return nil, io.EOF
	}
	if err != nil || l > 1<<30 {
		return nil, fmt.Errorf("%w: bad record length", ErrSnapshotCorrupt)
	}
	b := make([]byte, l)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("%w: truncated record", ErrSnapshotCorrupt)
	}
	return b, nil
}

var _ hash.Hash
