package config

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// SecurityConfig holds the security.* keys: which listeners are secured and
// with what (docs/security.md).
type SecurityConfig struct {
	// ProtocolMap, key security.protocol.map, default empty (every listener
	// PLAINTEXT): the security protocol of each listener, entries
	// LISTENER:PROTOCOL (e.g. CLIENT:SSL), LISTENER one of bind.listeners'
	// names (compared without regard to case), PROTOCOL one of
	// SecurityProtocols. A listener not listed is PLAINTEXT. A tablet
	// server reads the entry of its client listener (see ClientListener;
	// CLIENT by default) as the protocol of the coordinators it dials.
	ProtocolMap []string `koanf:"protocol.map"`
	// TLS holds the security.tls.* keys.
	TLS ListenerTLSConfig `koanf:"tls"`
	// SASL holds the security.sasl.* keys (password authentication on
	// SASL_SSL listeners; auth.go).
	SASL SASLConfig `koanf:"sasl"`
}

// ListenerTLSConfig holds the security.tls.* keys: the certificate every
// listener mapped to SSL serves, and how it verifies client certificates.
// A tablet server uses the same keys as a client of the coordinators: it
// trusts CAFile for the coordinator's certificate and presents
// CertFile/KeyFile as its own.
type ListenerTLSConfig struct {
	// CertFile, key security.tls.cert-file, default empty: the server
	// certificate (PEM; intermediates after the leaf). Required when a
	// listener is mapped to SSL. Re-read on change without a restart.
	CertFile string `koanf:"cert-file"`
	// KeyFile, key security.tls.key-file, default empty: the private key
	// (PEM) of CertFile. Required when a listener is mapped to SSL.
	KeyFile string `koanf:"key-file"`
	// CAFile, key security.tls.ca-file, default empty: the CA bundle (PEM)
	// that client certificates must chain to. Required when ClientAuth is
	// request or required.
	CAFile string `koanf:"ca-file"`
	// ClientAuth, key security.tls.client-auth, default none: whether a
	// client must present a certificate signed by CAFile: none (not asked
	// for), request (verified when given) or required (mutual TLS).
	ClientAuth string `koanf:"client-auth"`
}

// The security protocols of security.protocol.map.
const (
	// ProtocolPlaintext is a listener without encryption or authentication.
	ProtocolPlaintext = "PLAINTEXT"
	// ProtocolSSL is a listener with TLS (and, with
	// security.tls.client-auth, client certificates).
	ProtocolSSL = "SSL"
	// ProtocolSASLSSL is a listener with TLS on which every call carries a
	// username and password (SASL PLAIN over TLS).
	ProtocolSASLSSL = "SASL_SSL"
)

// SecurityProtocols lists the accepted protocols of security.protocol.map.
var SecurityProtocols = []string{ProtocolPlaintext, ProtocolSSL, ProtocolSASLSSL}

// ClientAuthModes lists the accepted values of security.tls.client-auth.
var ClientAuthModes = []string{"none", "request", "required"}

// ListenerProtocol returns the security protocol of the listener named name
// (PLAINTEXT, SSL or SASL_SSL, upper case): its security.protocol.map entry, or
// PLAINTEXT when it has none. It assumes a validated Config.
func (c *Config) ListenerProtocol(name string) string {
	for _, e := range c.Security.ProtocolMap {
		if n, p, ok := strings.Cut(e, ":"); ok && strings.EqualFold(strings.TrimSpace(n), name) {
			return strings.ToUpper(strings.TrimSpace(p))
		}
	}
	return ProtocolPlaintext
}

// validateSecurity checks security.protocol.map and security.tls.*. A
// tablet server (observer) serves its tablet service on its client
// listener as that listener is mapped, and dials the coordinators with the
// same certificate: it needs the certificate and key as a coordinator does
// (both or neither either way).
func (c *Config) validateSecurity(probs *Problems, listeners map[string]bool, observer bool) {
	const mapKey = "security.protocol.map"
	seen := map[string]bool{}
	var ssl []string
	for _, e := range c.Security.ProtocolMap {
		n, p, ok := strings.Cut(e, ":")
		n, p = strings.TrimSpace(n), strings.ToUpper(strings.TrimSpace(p))
		if !ok || !validListenerName(n) || p == "" {
			probs.Add(mapKey, fmt.Sprintf("%q: want LISTENER:PROTOCOL, e.g. CLIENT:SSL", e))
			continue
		}
		upper := strings.ToUpper(n)
		if seen[upper] {
			probs.Add(mapKey, fmt.Sprintf("listener %s is given twice", n))
		}
		seen[upper] = true
		known := false
		for l := range listeners {
			known = known || strings.EqualFold(l, n)
		}
		if !known {
			probs.Add(mapKey, fmt.Sprintf("listener %s is not one of bind.listeners' names", n))
		}
		switch {
		case p == ProtocolSSL || p == ProtocolSASLSSL:
			ssl = append(ssl, n+":"+p)
		case p == ProtocolPlaintext:
		case p == "SASL" || p == "SASL_PLAINTEXT":
			probs.Add(mapKey, fmt.Sprintf("%q: SASL on a plaintext listener would send the passwords of security.sasl.enabled.mechanisms (PLAIN) in the clear; map the listener to SASL_SSL (TLS, then a username and password)", e))
		default:
			probs.Add(mapKey, fmt.Sprintf("%q: unknown protocol %s: want one of %s", e, p, strings.Join(SecurityProtocols, ", ")))
		}
	}
	t := c.Security.TLS
	if observer && (strings.TrimSpace(t.CertFile) == "") != (strings.TrimSpace(t.KeyFile) == "") {
		probs.Add("security.tls.key-file", "security.tls.cert-file and security.tls.key-file (a tablet server's client certificate) go together")
	}
	if len(ssl) > 0 {
		for _, f := range []struct{ key, path string }{
			{"security.tls.cert-file", t.CertFile},
			{"security.tls.key-file", t.KeyFile},
		} {
			if strings.TrimSpace(f.path) == "" {
				probs.Add(f.key, fmt.Sprintf("required when security.protocol.map maps a listener to SSL or SASL_SSL (%s)", strings.Join(ssl, ", ")))
			}
		}
	}
	if !contains(ClientAuthModes, t.ClientAuth) {
		probs.Add("security.tls.client-auth", fmt.Sprintf("unknown mode %q: want one of %s", t.ClientAuth, strings.Join(ClientAuthModes, ", ")))
	} else if t.ClientAuth != "none" && strings.TrimSpace(t.CAFile) == "" {
		probs.Add("security.tls.ca-file", fmt.Sprintf("required when security.tls.client-auth is %s: the CA that client certificates must chain to", t.ClientAuth))
	}
}

// checkTLSFiles parses the PEM files of one certificate, its key and a CA
// bundle (each "" when not configured) and adds a problem naming the key at
// fault: unreadable, not PEM, no certificate or key in it, a certificate
// that has expired or is not valid yet, a key that does not match the
// certificate.
func checkTLSFiles(probs *Problems, now time.Time, certKey, certPath, keyKey, keyPath, caKey, caPath string) {
	read := func(key, path string) []byte {
		if path == "" {
			return nil
		}
		st, err := os.Stat(path)
		if err == nil && st.IsDir() {
			probs.Add(key, fmt.Sprintf("%s is a directory, not a file", path))
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			probs.Add(key, fmt.Sprintf("cannot read %s: %v", path, shortErr(err)))
			return nil
		}
		return b
	}
	certPEM := read(certKey, certPath)
	certOK := false
	if certPEM != nil {
		certOK = checkCertificates(probs, now, certKey, certPath, certPEM, "certificate")
	}
	if keyPEM := read(keyKey, keyPath); keyPEM != nil {
		if err := checkPrivateKey(keyPEM); err != nil {
			probs.Add(keyKey, fmt.Sprintf("%s: %v", keyPath, err))
		} else if certOK {
			if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
				probs.Add(keyKey, fmt.Sprintf("%s does not match the certificate in %s (%s): %v", keyPath, certKey, certPath, err))
			}
		}
	}
	if caPEM := read(caKey, caPath); caPEM != nil {
		checkCertificates(probs, now, caKey, caPath, caPEM, "CA certificate")
	}
}

// checkCertificates parses every PEM block of b as a certificate and checks
// its validity period; it reports whether b held at least one certificate
// and every block parsed.
func checkCertificates(probs *Problems, now time.Time, key, path string, b []byte, what string) bool {
	n, ok := 0, true
	for rest := b; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		n++
		if block.Type != "CERTIFICATE" {
			probs.Add(key, fmt.Sprintf("%s: PEM block %d is %q, want CERTIFICATE", path, n, block.Type))
			ok = false
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			probs.Add(key, fmt.Sprintf("%s: PEM block %d is not a valid certificate: %v", path, n, err))
			ok = false
			continue
		}
		subject := c.Subject.String()
		if subject == "" {
			subject = "(empty subject)"
		}
		switch {
		case now.After(c.NotAfter):
			probs.Add(key, fmt.Sprintf("%s: %s %s expired on %s", path, what, subject, c.NotAfter.UTC().Format(time.RFC3339)))
		case now.Before(c.NotBefore):
			probs.Add(key, fmt.Sprintf("%s: %s %s is not valid before %s", path, what, subject, c.NotBefore.UTC().Format(time.RFC3339)))
		}
	}
	if n == 0 {
		probs.Add(key, fmt.Sprintf("%s holds no PEM %s", path, what))
		return false
	}
	return ok
}

// checkPrivateKey checks that b holds a PEM private key Go can use.
func checkPrivateKey(b []byte) error {
	for rest := b; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return errors.New("holds no PEM private key")
		}
		if block.Type != "PRIVATE KEY" && !strings.HasSuffix(block.Type, " PRIVATE KEY") {
			continue
		}
		if _, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
			return nil
		}
		if _, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
			return nil
		}
		if _, err := x509.ParseECPrivateKey(block.Bytes); err == nil {
			return nil
		}
		return fmt.Errorf("the %s block is not a valid private key", block.Type)
	}
}
