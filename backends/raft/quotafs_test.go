package raft

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	pvfs "github.com/cockroachdb/pebble/v2/vfs"
	gvfs "github.com/lni/vfs"
)

// quotaFS is a test filesystem over the operating system's, shared by a
// member's two stores: Dragonboat's NodeHost (LogDB, snapshots, metadata)
// through raftFS and the state machine's Pebble store through stateFS.
// What they write through it counts against a quota: GetDiskUsage reports
// the quota's remaining space as the available bytes, and a write that
// would take the files past the quota fails with ENOSPC, as a full disk
// does. It is safe for concurrent use.
//
// Usage is the sum of the sizes of the files under root, measured when the
// quota is made and kept up to date by every create, write, remove and
// rename through it. Preallocated space (fallocate that keeps the size)
// is not counted, and files written around it (the cluster id, the
// non-voting marker, a snapshot being recovered, all by os calls) neither.
type quotaFS struct {
	mu      sync.Mutex
	quota   int64
	used    int64
	sizes   map[string]int64
	refused []string // the refused writes, for the test to report
}

// newQuotaFS measures the files already under root (a directory reopened)
// and sets the quota.
func newQuotaFS(root string, quota int64) *quotaFS {
	q := &quotaFS{quota: quota, sizes: map[string]int64{}}
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				q.sizes[p] = fi.Size()
				q.used += fi.Size()
			}
		}
		return nil
	})
	return q
}

// storage is the member storage that writes through q. Dragonboat's LogDB
// accepts no filesystem but the OS's, its in-memory one and its
// error-injecting wrapper (anything else panics "invalid fs" inside
// NewNodeHost), so the quota reaches it inside that wrapper, with an
// injector that never injects. That wrapper also puts the NodeHost's step
// workers in Dragonboat's error-injection mode: a panic with an error there
// (a failed LogDB write) stops the NodeHost's engine instead of the
// process. The guard's job is that no write fails, and the tests check it
// (refusals).
func (q *quotaFS) storage() storage {
	return storage{
		raft:  gvfs.Wrap(raftQuotaFS{FS: gvfs.Default, q: q}, noInjection{}),
		state: stateQuotaFS{FS: pvfs.Default, q: q},
	}
}

// noInjection is an lni/vfs injector that never injects an error.
type noInjection struct{}

func (noInjection) MaybeError(gvfs.Op) error { return nil }

// setQuota changes the quota.
func (q *quotaFS) setQuota(n int64) {
	q.mu.Lock()
	q.quota = n
	q.mu.Unlock()
}

// usage reports the bytes used and the quota.
func (q *quotaFS) usage() (used, quota int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.used, q.quota
}

// refusals returns the writes refused with ENOSPC so far.
func (q *quotaFS) refusals() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]string(nil), q.refused...)
}

func (q *quotaFS) diskUsage() (avail, total, used uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.used < q.quota {
		avail = uint64(q.quota - q.used)
	}
	return avail, uint64(q.quota), uint64(q.used)
}

// grow records that name reaches end bytes, or refuses with ENOSPC when
// that takes the usage past the quota (then nothing is written).
func (q *quotaFS) grow(name string, end int64) error {
	name = filepath.Clean(name)
	q.mu.Lock()
	defer q.mu.Unlock()
	cur := q.sizes[name]
	if end <= cur {
		return nil
	}
	if q.used+end-cur > q.quota {
		q.refused = append(q.refused, name)
		return &os.PathError{Op: "write", Path: name, Err: syscall.ENOSPC}
	}
	q.used += end - cur
	q.sizes[name] = end
	return nil
}

// opened records a file opened for writing: truncated to 0 (created) or
// with its size on disk.
func (q *quotaFS) opened(name string, truncated bool) int64 {
	name = filepath.Clean(name)
	var size int64
	if !truncated {
		if fi, err := os.Stat(name); err == nil {
			size = fi.Size()
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.used += size - q.sizes[name]
	q.sizes[name] = size
	return size
}

func (q *quotaFS) removed(name string) {
	name = filepath.Clean(name)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.used -= q.sizes[name]
	delete(q.sizes, name)
}

func (q *quotaFS) removedAll(dir string) {
	dir = filepath.Clean(dir)
	q.mu.Lock()
	defer q.mu.Unlock()
	for p, n := range q.sizes {
		if p == dir || strings.HasPrefix(p, dir+string(filepath.Separator)) {
			q.used -= n
			delete(q.sizes, p)
		}
	}
}

func (q *quotaFS) renamed(oldname, newname string) {
	oldname, newname = filepath.Clean(oldname), filepath.Clean(newname)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.used -= q.sizes[newname]
	if n, ok := q.sizes[oldname]; ok {
		q.sizes[newname] = n
		delete(q.sizes, oldname)
	} else {
		delete(q.sizes, newname)
	}
}

// linked counts a hard link as a copy (a real disk would not, so the quota
// errs towards full).
func (q *quotaFS) linked(oldname, newname string) {
	oldname, newname = filepath.Clean(oldname), filepath.Clean(newname)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.used += q.sizes[oldname] - q.sizes[newname]
	q.sizes[newname] = q.sizes[oldname]
}

// writer is the accounting of one file open for writing: Write continues
// at off, WriteAt at its offset.
type writer struct {
	q    *quotaFS
	name string
	off  int64
}

func (w *writer) write(p []byte, do func([]byte) (int, error)) (int, error) {
	if err := w.q.grow(w.name, w.off+int64(len(p))); err != nil {
		return 0, err
	}
	n, err := do(p)
	w.off += int64(n)
	return n, err
}

func (w *writer) writeAt(p []byte, off int64, do func([]byte, int64) (int, error)) (int, error) {
	if err := w.q.grow(w.name, off+int64(len(p))); err != nil {
		return 0, err
	}
	return do(p, off)
}

// stateQuotaFS is the quota as Pebble v2's vfs.FS (the state machine).
type stateQuotaFS struct {
	pvfs.FS // vfs.Default: Open, OpenDir, MkdirAll, Lock, List, Stat, Path*
	q       *quotaFS
}

type stateQuotaFile struct {
	pvfs.File
	w *writer
}

func (f stateQuotaFile) Write(p []byte) (int, error) { return f.w.write(p, f.File.Write) }
func (f stateQuotaFile) WriteAt(p []byte, off int64) (int, error) {
	return f.w.writeAt(p, off, f.File.WriteAt)
}

func (s stateQuotaFS) wrap(name string, f pvfs.File, err error, truncated bool) (pvfs.File, error) {
	if err != nil {
		return nil, err
	}
	// Created empty, or opened to be written from the start.
	s.q.opened(name, truncated)
	return stateQuotaFile{File: f, w: &writer{q: s.q, name: filepath.Clean(name)}}, nil
}

func (s stateQuotaFS) Create(name string, c pvfs.DiskWriteCategory) (pvfs.File, error) {
	f, err := pvfs.Default.Create(name, c)
	return s.wrap(name, f, err, true)
}

func (s stateQuotaFS) OpenReadWrite(name string, c pvfs.DiskWriteCategory, opts ...pvfs.OpenOption) (pvfs.File, error) {
	f, err := pvfs.Default.OpenReadWrite(name, c, opts...)
	return s.wrap(name, f, err, false)
}

func (s stateQuotaFS) ReuseForWrite(oldname, newname string, c pvfs.DiskWriteCategory) (pvfs.File, error) {
	f, err := pvfs.Default.ReuseForWrite(oldname, newname, c)
	if err == nil {
		s.q.renamed(oldname, newname)
	}
	return s.wrap(newname, f, err, false)
}

func (s stateQuotaFS) Link(oldname, newname string) error {
	err := pvfs.Default.Link(oldname, newname)
	if err == nil {
		s.q.linked(oldname, newname)
	}
	return err
}

func (s stateQuotaFS) Remove(name string) error {
	err := pvfs.Default.Remove(name)
	if err == nil {
		s.q.removed(name)
	}
	return err
}

func (s stateQuotaFS) RemoveAll(name string) error {
	err := pvfs.Default.RemoveAll(name)
	s.q.removedAll(name)
	return err
}

func (s stateQuotaFS) Rename(oldname, newname string) error {
	err := pvfs.Default.Rename(oldname, newname)
	if err == nil {
		s.q.renamed(oldname, newname)
	}
	return err
}

func (s stateQuotaFS) GetDiskUsage(string) (pvfs.DiskUsage, error) {
	a, t, u := s.q.diskUsage()
	return pvfs.DiskUsage{AvailBytes: a, TotalBytes: t, UsedBytes: u}, nil
}

func (s stateQuotaFS) Unwrap() pvfs.FS { return pvfs.Default }

// raftQuotaFS is the quota as Dragonboat's filesystem (lni/vfs, the
// NodeHostConfig.Expert.FS that its LogDB and snapshots use).
type raftQuotaFS struct {
	gvfs.FS // gvfs.Default: Open, OpenDir, MkdirAll, Lock, List, Stat, Path*
	q       *quotaFS
}

type raftQuotaFile struct {
	gvfs.File
	w *writer
}

func (f raftQuotaFile) Write(p []byte) (int, error) { return f.w.write(p, f.File.Write) }
func (f raftQuotaFile) WriteAt(p []byte, off int64) (int, error) {
	return f.w.writeAt(p, off, f.File.WriteAt)
}

// Seek moves where Write continues.
func (f raftQuotaFile) Seek(offset int64, whence int) (int64, error) {
	n, err := f.File.Seek(offset, whence)
	if err == nil {
		f.w.off = n
	}
	return n, err
}

func (s raftQuotaFS) wrap(name string, f gvfs.File, err error, off int64) (gvfs.File, error) {
	if err != nil {
		return nil, err
	}
	return raftQuotaFile{File: f, w: &writer{q: s.q, name: filepath.Clean(name), off: off}}, nil
}

func (s raftQuotaFS) Create(name string) (gvfs.File, error) {
	f, err := gvfs.Default.Create(name)
	if err == nil {
		s.q.opened(name, true)
	}
	return s.wrap(name, f, err, 0)
}

func (s raftQuotaFS) OpenForAppend(name string) (gvfs.File, error) {
	f, err := gvfs.Default.OpenForAppend(name)
	var off int64
	if err == nil {
		off = s.q.opened(name, false)
	}
	return s.wrap(name, f, err, off)
}

func (s raftQuotaFS) ReuseForWrite(oldname, newname string) (gvfs.File, error) {
	f, err := gvfs.Default.ReuseForWrite(oldname, newname)
	if err == nil {
		s.q.renamed(oldname, newname)
		s.q.opened(newname, false)
	}
	return s.wrap(newname, f, err, 0)
}

func (s raftQuotaFS) Link(oldname, newname string) error {
	err := gvfs.Default.Link(oldname, newname)
	if err == nil {
		s.q.linked(oldname, newname)
	}
	return err
}

func (s raftQuotaFS) Remove(name string) error {
	err := gvfs.Default.Remove(name)
	if err == nil {
		s.q.removed(name)
	}
	return err
}

func (s raftQuotaFS) RemoveAll(name string) error {
	err := gvfs.Default.RemoveAll(name)
	s.q.removedAll(name)
	return err
}

func (s raftQuotaFS) Rename(oldname, newname string) error {
	err := gvfs.Default.Rename(oldname, newname)
	if err == nil {
		s.q.renamed(oldname, newname)
	}
	return err
}

func (s raftQuotaFS) GetDiskUsage(string) (gvfs.DiskUsage, error) {
	a, t, u := s.q.diskUsage()
	return gvfs.DiskUsage{AvailBytes: a, TotalBytes: t, UsedBytes: u}, nil
}

var (
	_ pvfs.FS   = stateQuotaFS{}
	_ gvfs.FS   = raftQuotaFS{}
	_ io.Seeker = raftQuotaFile{}
)

// wrote reports whether files under dir were written through q.
func (q *quotaFS) wrote(dir string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for p, n := range q.sizes {
		if n > 0 && strings.HasPrefix(p, filepath.Clean(dir)+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// TestQuotaFS: the quota filesystem refuses a write past its quota with
// ENOSPC and writes nothing of it, reports the remaining space, and gives
// space back on remove, through either face.
func TestQuotaFS(t *testing.T) {
	dir := t.TempDir()
	q := newQuotaFS(dir, 100)
	st := q.storage()
	f, err := st.state.Create(filepath.Join(dir, "a"), pvfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 60)); err != nil {
		t.Fatal(err)
	}
	if free, _ := st.free(dir); free != 40 {
		t.Fatalf("free after 60 of 100 bytes: %d, want 40", free)
	}
	g, err := st.raft.Create(filepath.Join(dir, "b"))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := g.Write(make([]byte, 41)); !errors.Is(err, syscall.ENOSPC) || n != 0 {
		t.Fatalf("write past the quota: %d, %v; want 0, ENOSPC", n, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "b")); err != nil || fi.Size() != 0 {
		t.Fatalf("the refused write left %v, %v", fi, err)
	}
	if _, err := g.Write(make([]byte, 40)); err != nil {
		t.Fatalf("write up to the quota: %v", err)
	}
	f.Close()
	g.Close()
	if err := st.state.Remove(filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	if du, _ := st.raft.GetDiskUsage(dir); du.AvailBytes != 60 || du.UsedBytes != 40 {
		t.Fatalf("after removing 60 bytes: %+v, want 60 available, 40 used", du)
	}
	if len(q.refusals()) != 1 {
		t.Fatalf("refusals: %v, want one", q.refusals())
	}
}
