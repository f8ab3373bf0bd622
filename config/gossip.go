package config

import (
	"encoding/base64"
	"fmt"
	"os"
	"strings"
)

// gossipKeySizes are the accepted lengths of the decoded gossip key
// (AES-128, AES-192, AES-256).
var gossipKeySizes = []int{16, 24, 32}

// decodeGossipKey decodes a base64 gossip key and checks its length.
func decodeGossipKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("not base64 (standard alphabet, with padding): %v", err)
	}
	for _, n := range gossipKeySizes {
		if len(b) == n {
			return b, nil
		}
	}
	return nil, fmt.Errorf("decodes to %d bytes: want 16, 24 or 32 (e.g. the output of `head -c 32 /dev/urandom | base64`)", len(b))
}

func (c *Config) validateGossip(probs *Problems) {
	g := c.Coordinator.Gossip
	if g.EncryptionKey != "" && g.EncryptionKeyFile != "" {
		probs.Add("coordinator.gossip.encryption-key", "give the key or coordinator.gossip.encryption-key-file, not both")
	}
	if g.EncryptionKey != "" {
		if _, err := decodeGossipKey(g.EncryptionKey); err != nil {
			probs.Add("coordinator.gossip.encryption-key", err.Error())
		}
	}
}

// checkGossipKeyFile reads coordinator.gossip.encryption-key-file, when
// set, and checks the key it holds.
func (c *Config) checkGossipKeyFile(probs *Problems) {
	if f := c.Coordinator.Gossip.EncryptionKeyFile; f != "" {
		if _, err := readGossipKeyFile(f); err != nil {
			probs.Add("coordinator.gossip.encryption-key-file", err.Error())
		}
	}
}

func readGossipKeyFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %v", path, shortErr(err))
	}
	k, err := decodeGossipKey(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return k, nil
}

// GossipKey returns the decoded gossip encryption key
// (coordinator.gossip.encryption-key, or the content of
// coordinator.gossip.encryption-key-file), or nil when none is configured
// (plaintext gossip). Errors: an unreadable file, a value that is not
// base64 or not 16, 24 or 32 bytes long; each names the file when it
// comes from one.
func (c *Config) GossipKey() ([]byte, error) {
	g := c.Coordinator.Gossip
	switch {
	case g.EncryptionKey != "":
		return decodeGossipKey(g.EncryptionKey)
	case g.EncryptionKeyFile != "":
		return readGossipKeyFile(g.EncryptionKeyFile)
	}
	return nil, nil
}
