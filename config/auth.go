package config

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
)

// SASLConfig holds the security.sasl.* keys: the password authentication
// of SASL_SSL listeners (docs/security.md).
type SASLConfig struct {
	// EnabledMechanisms, key security.sasl.enabled.mechanisms, default
	// [PLAIN] (the original's): the SASL mechanisms a SASL_SSL listener
	// accepts. PLAIN (a username and password, carried over TLS only) is
	// the one there is.
	EnabledMechanisms []string `koanf:"enabled.mechanisms"`
	// PlainCredentialsFile, key security.sasl.plain.credentials-file,
	// default empty: the users a SASL_SSL listener accepts and their
	// passwords, one username:password a line (ReadCredentialsFile).
	// Required when a listener is mapped to SASL_SSL. Read at start and
	// again on SIGHUP.
	PlainCredentialsFile string `koanf:"plain.credentials-file"`
}

// AuthorizerConfig holds the authorizer.* keys.
type AuthorizerConfig struct {
	// Enabled, key authorizer.enabled, default false (the original's):
	// check every admin and tablet-server call against the stored ACLs.
	Enabled bool `koanf:"enabled"`
}

// ClientSASLConfig holds the client.security.sasl.* keys: what a tablet
// server presents when the coordinators' CLIENT listener is SASL_SSL.
type ClientSASLConfig struct {
	// Username, key client.security.sasl.username, default empty: the
	// tablet server's username (its principal is User:<username>).
	Username string `koanf:"username"`
	// PasswordFile, key client.security.sasl.password-file, default
	// empty: a file holding its password (the first line). Required with
	// Username.
	PasswordFile string `koanf:"password-file"`
}

// MechanismPlain is the SASL mechanism of a username and password.
const MechanismPlain = "PLAIN"

// SASLMechanisms lists the accepted values of
// security.sasl.enabled.mechanisms.
var SASLMechanisms = []string{MechanismPlain}

// PrincipalUser is the principal type of every authenticated client
// ("User:alice").
const PrincipalUser = "User"

// Principal is who a call comes from: a type (User) and a name.
type Principal struct {
	Type string
	Name string
}

// String gives the principal as the original writes it: "User:alice".
func (p Principal) String() string { return p.Type + ":" + p.Name }

// ParsePrincipal parses "User:alice" (the type compared without regard to
// case, written back as User). Errors name what is wrong.
func ParsePrincipal(s string) (Principal, error) {
	t, n, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok || n == "" {
		return Principal{}, fmt.Errorf("%q: want TYPE:name, e.g. User:admin", s)
	}
	if !strings.EqualFold(strings.TrimSpace(t), PrincipalUser) {
		return Principal{}, fmt.Errorf("%q: unknown principal type %q: want User", s, t)
	}
	return Principal{Type: PrincipalUser, Name: n}, nil
}

// SuperUserList returns the principals of super.users. It assumes a
// validated Config.
func (c *Config) SuperUserList() []Principal {
	var out []Principal
	for _, e := range strings.Split(c.SuperUsers, ";") {
		if strings.TrimSpace(e) == "" {
			continue
		}
		if p, err := ParsePrincipal(e); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// SASLPlainEnabled reports whether security.sasl.enabled.mechanisms has
// PLAIN.
func (c *Config) SASLPlainEnabled() bool {
	for _, m := range c.Security.SASL.EnabledMechanisms {
		if strings.EqualFold(m, MechanismPlain) {
			return true
		}
	}
	return false
}

// validateAuth checks the authentication and authorization keys. A tablet
// server (observer) needs client.security.sasl.* to dial a SASL_SSL
// coordinator; its own credentials file (the users of its tablet service)
// is optional.
func (c *Config) validateAuth(probs *Problems, observer bool) {
	for _, m := range c.Security.SASL.EnabledMechanisms {
		if !contains(SASLMechanisms, strings.ToUpper(m)) {
			probs.Add("security.sasl.enabled.mechanisms", fmt.Sprintf("unknown mechanism %q: want %s", m, strings.Join(SASLMechanisms, ", ")))
		}
	}
	var sasl []string
	for _, e := range c.Security.ProtocolMap {
		if n, p, ok := strings.Cut(e, ":"); ok && strings.EqualFold(strings.TrimSpace(p), ProtocolSASLSSL) {
			sasl = append(sasl, strings.TrimSpace(n)+":"+ProtocolSASLSSL)
		}
	}
	if len(sasl) > 0 {
		if !c.SASLPlainEnabled() {
			probs.Add("security.sasl.enabled.mechanisms", fmt.Sprintf("must include PLAIN when security.protocol.map maps a listener to SASL_SSL (%s)", strings.Join(sasl, ", ")))
		}
		if observer && c.ClientSASL.Username == "" {
			probs.Add("client.security.sasl.username", fmt.Sprintf("required on a tablet server when security.protocol.map maps the coordinators' listener to SASL_SSL (%s)", strings.Join(sasl, ", ")))
		}
		if !observer && strings.TrimSpace(c.Security.SASL.PlainCredentialsFile) == "" {
			probs.Add("security.sasl.plain.credentials-file", fmt.Sprintf("required when security.protocol.map maps a listener to SASL_SSL (%s): the users and their passwords", strings.Join(sasl, ", ")))
		}
	}
	for _, e := range strings.Split(c.SuperUsers, ";") {
		if strings.TrimSpace(e) == "" {
			continue
		}
		if _, err := ParsePrincipal(e); err != nil {
			probs.Add("super.users", err.Error()+"; entries are separated by ';'")
		}
	}
	cs := c.ClientSASL
	switch {
	case cs.Username != "" && strings.TrimSpace(cs.PasswordFile) == "":
		probs.Add("client.security.sasl.password-file", "required with client.security.sasl.username")
	case cs.Username == "" && cs.PasswordFile != "":
		probs.Add("client.security.sasl.username", "required with client.security.sasl.password-file")
	case strings.Contains(cs.Username, ":"):
		probs.Add("client.security.sasl.username", fmt.Sprintf("%q: a username has no ':'", cs.Username))
	}
}

// maxCredentialsFile bounds the credentials and password files read.
const maxCredentialsFile = 1 << 20

// ReadCredentialsFile reads the users of security.sasl.plain.credentials-
// file: one "username:password" a line (the password is everything after
// the first ':', spaces included; a trailing "\r" is dropped), blank lines
// and lines starting with '#' ignored. A username is not empty and has no
// ':' or space; a password is not empty; a username appears once. Errors
// name the file and the line, never a password.
func ReadCredentialsFile(path string) (map[string]string, error) {
	b, err := readSmall(path)
	if err != nil {
		return nil, err
	}
	users := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), maxCredentialsFile)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		u, p, ok := strings.Cut(line, ":")
		switch {
		case !ok:
			return nil, fmt.Errorf("%s: line %d: want username:password", path, n)
		case u == "" || strings.ContainsAny(u, " \t"):
			return nil, fmt.Errorf("%s: line %d: the username is empty or has spaces", path, n)
		case p == "":
			return nil, fmt.Errorf("%s: line %d: user %s has an empty password", path, n, u)
		}
		if _, dup := users[u]; dup {
			return nil, fmt.Errorf("%s: line %d: user %s is given twice", path, n, u)
		}
		users[u] = p
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(users) == 0 {
		return nil, fmt.Errorf("%s lists no user (want username:password lines)", path)
	}
	return users, nil
}

// ReadPasswordFile reads a client's password: the first line of the file
// (without its line ending). Errors: unreadable, empty.
func ReadPasswordFile(path string) (string, error) {
	b, err := readSmall(path)
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	line = strings.TrimSuffix(line, "\r")
	if line == "" {
		return "", fmt.Errorf("%s: the first line (the password) is empty", path)
	}
	return line, nil
}

func readSmall(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %v", path, shortErr(err))
	}
	if st.IsDir() {
		return nil, fmt.Errorf("%s is a directory, not a file", path)
	}
	if st.Size() > maxCredentialsFile {
		return nil, fmt.Errorf("%s is %d bytes: at most %d", path, st.Size(), maxCredentialsFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %v", path, shortErr(err))
	}
	return b, nil
}

// checkAuthFiles is CheckFiles' part for the password files: each must
// parse, and the credentials file must not be readable by every user.
func (c *Config) checkAuthFiles(probs *Problems) {
	if p := c.Security.SASL.PlainCredentialsFile; p != "" {
		if _, err := ReadCredentialsFile(p); err != nil {
			probs.Add("security.sasl.plain.credentials-file", err.Error())
		} else if st, err := os.Stat(p); err == nil && st.Mode().Perm()&0o004 != 0 {
			probs.Add("security.sasl.plain.credentials-file", fmt.Sprintf("%s is readable by every user (mode %v): chmod o-r it", p, st.Mode().Perm()))
		}
	}
	if p := c.ClientSASL.PasswordFile; p != "" {
		if _, err := ReadPasswordFile(p); err != nil {
			probs.Add("client.security.sasl.password-file", err.Error())
		}
	}
}
