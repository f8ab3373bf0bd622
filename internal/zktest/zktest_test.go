package zktest

import (
	"net"
	"strings"
	"testing"
	"time"
)

func TestStandaloneServes(t *testing.T) {
	c := StartServer(t)
	if got := c.Mode(0); got != "standalone" {
		t.Fatalf("mode: got %q, want standalone", got)
	}
	out, err := FourLetter(c.Addr(0), "ruok", time.Second)
	if err != nil || out != "imok" {
		t.Fatalf("ruok: got %q, %v; want imok", out, err)
	}
	c.Kill(0)
	if c.Running(0) {
		t.Fatal("server still running after Kill")
	}
	if _, err := FourLetter(c.Addr(0), "ruok", 200*time.Millisecond); err == nil {
		t.Fatal("killed server still answers")
	}
	if err := c.Restart(0); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if got := c.Mode(0); got != "standalone" {
		t.Fatalf("mode after restart: got %q", got)
	}
}

func TestEnsembleQuorum(t *testing.T) {
	if testing.Short() {
		t.Skip("ensemble start in -short mode")
	}
	c := StartEnsemble(t, 3)
	leader := c.Leader()
	if leader < 0 {
		t.Fatal("no leader in a fresh ensemble")
	}
	modes := map[string]int{}
	for i := 0; i < 3; i++ {
		modes[c.Mode(i)]++
	}
	if modes["leader"] != 1 || modes["follower"] != 2 {
		t.Fatalf("modes: got %v, want 1 leader and 2 followers", modes)
	}
	c.Kill(leader)
	deadline := time.Now().Add(30 * time.Second)
	for {
		l := c.Leader()
		if l >= 0 && l != leader {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no new leader 30s after killing the old one")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := c.Restart(leader); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if m := c.Mode(leader); m != "follower" && m != "leader" {
		t.Fatalf("restarted member mode: %q", m)
	}
	if !strings.Contains(c.ConnectString(), ",") {
		t.Fatalf("connect string %q lists one server", c.ConnectString())
	}
}

func TestProxyCutAndRestore(t *testing.T) {
	// An echo server stands in for ZooKeeper.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 64)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					c.Write(buf[:n])
				}
			}()
		}
	}()
	p := StartProxy(t, ln.Addr().String())
	echo := func(c net.Conn) error {
		c.SetDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := c.Write([]byte("x")); err != nil {
			return err
		}
		b := make([]byte, 1)
		_, err := c.Read(b)
		return err
	}
	c1, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	if err := echo(c1); err != nil {
		t.Fatalf("echo through proxy: %v", err)
	}
	p.Cut()
	if err := echo(c1); err == nil {
		t.Fatal("echo on a cut connection succeeded")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		if err := echo(c2); err == nil {
			t.Fatal("echo on a new connection while cut succeeded")
		}
		c2.Close()
	}
	p.SetMode(Blackhole)
	p.Restore()
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if err := echo(c3); err != nil {
		t.Fatalf("echo after restore: %v", err)
	}
	p.SetMode(Blackhole)
	if err := echo(c3); err == nil {
		t.Fatal("echo through a blackhole succeeded")
	}
}

func TestExtraConfig(t *testing.T) {
	c := StartCluster(t, Options{Config: []string{"maxClientCnxns=7"}, JVMFlags: []string{"-Dzookeeper.test.marker=1"}})
	out, err := FourLetter(c.Addr(0), "conf", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "maxClientCnxns=7") {
		t.Fatalf("conf does not show the extra line:\n%s", out)
	}
}
