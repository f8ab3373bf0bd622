// Package ports hands out free TCP ports on 127.0.0.1 for tests, demos and
// benchmarks that start servers which must be told their port in advance.
package ports

import (
	"fmt"
	"net"
	"sync"
)

var (
	mu     sync.Mutex
	issued = map[int]bool{}
)

// Free returns a TCP port on 127.0.0.1 that was free a moment ago and that
// this process has not handed out before. Asking the kernel for port 0 and
// closing the listener can give the same port twice when two callers ask
// at once (seen with three Raft voters started together), so ports already
// issued are skipped. Another process may still take the port before it is
// used; callers that start real servers should retry on "address in use".
func Free() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	for attempt := 0; attempt < 100; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("ports: listen on 127.0.0.1:0: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !issued[port] {
			issued[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("ports: no fresh port after 100 attempts")
}
