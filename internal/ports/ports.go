// Package ports hands out free TCP ports on 127.0.0.1 for tests, demos and
// benchmarks that start servers which must be told their port in advance.
package ports

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

var (
	mu     sync.Mutex
	issued = map[int]bool{}
)

// The ports this process has handed out are also claimed against other
// processes on the machine: each is a one-byte record lock (fcntl F_SETLK),
// at the port's offset, on one shared file in the temporary directory. Test
// packages run as parallel processes, each with its own issued set; without
// the claim two of them could probe the same port free and both hand it out
// (seen as "bind: address already in use" when the second server starts).
// Record locks belong to the process and go with it when it exits, however
// it exits, so no claim outlives its holder and nothing needs cleaning up.
var (
	claimOnce sync.Once
	claimFile *os.File // kept open for the process's life: closing any descriptor of it drops every lock
)

// claimName is the shared file's name in os.TempDir().
const claimName = "metaplane-ports.lock"

// claim takes port for this process against other processes that use this
// package. It reports false when another live process holds it. Where the
// shared file cannot be opened (a read-only temporary directory), every
// claim succeeds and only the in-process set and the bind probe guard.
func claim(port int) bool {
	claimOnce.Do(func() {
		f, err := os.OpenFile(filepath.Join(os.TempDir(), claimName), os.O_RDWR|os.O_CREATE, 0o666)
		if err == nil {
			claimFile = f
		}
	})
	if claimFile == nil {
		return true
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: int64(port), Len: 1}
	return syscall.FcntlFlock(claimFile.Fd(), syscall.F_SETLK, &lk) == nil
}

// lowest is the lowest port handed out: below it are the well-known and
// commonly configured ports.
const lowest = 10000

// Free returns a TCP port on 127.0.0.1 that was free a moment ago and that
// this process has not handed out before.
//
// It picks ports below the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range) when there is room there: a port
// from that range, once its probe listener is closed, can be taken by any
// process's next outgoing connection before the server it was meant for
// binds it (seen as "address already in use" when test packages run in
// parallel). Where the range leaves no room it asks the kernel for port 0.
// Ports already issued are skipped, since two callers asking at once can
// otherwise get the same port, and so are ports another process using this
// package has handed out (see claim). A process that does not use this
// package may still take the port before it is used; callers that start
// real servers may retry on "address in use".
func Free() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	if hi := ephemeralLow() - 1; hi-lowest >= 1000 {
		for attempt := 0; attempt < 1000; attempt++ {
			port := lowest + rand.IntN(hi-lowest+1)
			if issued[port] || !bindable(port) || !claim(port) {
				continue
			}
			issued[port] = true
			return port, nil
		}
	}
	for attempt := 0; attempt < 100; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("ports: listen on 127.0.0.1:0: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !issued[port] && claim(port) {
			issued[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("ports: no fresh port after 100 attempts")
}

// bindable reports whether port can be listened on now, over TCP and UDP
// (some servers, such as the gossip listener, bind both).
func bindable(port int) bool {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}

// ephemeralLow is the low end of the kernel's ephemeral port range, or 0
// when it cannot be read (no room below it is assumed then).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return n
}
