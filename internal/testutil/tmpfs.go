package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// MountTmpfs mounts a tmpfs of size bytes on a new directory under
// t.TempDir() and unmounts it at cleanup: a small real file system to fill
// up. Mounting needs root (CAP_SYS_ADMIN): elsewhere t is skipped naming
// why, except under CI=true, where it fails (RequireOrSkip).
func MountTmpfs(t testing.TB, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size))
	RequireOrSkip(t, err == nil, "mount a %d-byte tmpfs on %s (needs root): %v", size, dir, err)
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// FreeBytes is the space available to this process on dir's file system.
func FreeBytes(t testing.TB, dir string) uint64 {
	t.Helper()
	var s syscall.Statfs_t
	if err := syscall.Statfs(dir, &s); err != nil {
		t.Fatal(err)
	}
	return s.Bavail * uint64(s.Bsize)
}

// FillDisk allocates a file on dir's file system that leaves about left
// bytes free, and returns its path (remove it to free the space).
func FillDisk(t testing.TB, dir string, left uint64) string {
	t.Helper()
	free := FreeBytes(t, dir)
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if free > left {
		if err := syscall.Fallocate(int(f.Fd()), 0, 0, int64(free-left)); err != nil {
			t.Fatalf("fill %s: %v", dir, err)
		}
	}
	return path
}
