package daemon

import (
	"net"
	"os"
	"testing"

	"github.com/metaplane/metaplane/config"
)

// TestAdvertisedAddress: advertised.listeners' entry wins; else the bound
// address, with a wildcard host replaced by the host name.
func TestAdvertisedAddress(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	bound := &net.TCPAddr{IP: net.IPv6zero, Port: 9123}
	adv := config.Listener{Name: "FLUSS", Host: "coord-1.example.com", Port: 19123}
	for _, tt := range []struct {
		cl   config.ClientListenerChoice
		addr net.Addr
		want string
	}{
		{config.ClientListenerChoice{Bind: config.Listener{Name: "FLUSS", Host: "0.0.0.0", Port: 9123}}, bound, net.JoinHostPort(host, "9123")},
		{config.ClientListenerChoice{Bind: config.Listener{Name: "FLUSS", Host: "::", Port: 9123}}, bound, net.JoinHostPort(host, "9123")},
		{config.ClientListenerChoice{Bind: config.Listener{Name: "FLUSS", Host: "0.0.0.0", Port: 9123}, Advertised: &adv}, bound, "coord-1.example.com:19123"},
		{config.ClientListenerChoice{Bind: config.Listener{Name: "CLIENT", Host: "127.0.0.1", Port: 0}}, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}, "127.0.0.1:40000"},
	} {
		if got, note := advertisedAddress(tt.cl, tt.addr); got != tt.want || note == "" {
			t.Errorf("%+v bound at %s: got %q (%s), want %q", tt.cl, tt.addr, got, note, tt.want)
		}
	}
}
