package core

import (
	"fmt"
	"strings"
)

// ValidatePath reports whether p is a well-formed absolute node path: it
// starts with "/", has no empty segment, no trailing slash (except the root
// "/" itself), no "." or ".." segment and no NUL or other control character.
// The error wraps ErrInvalidPath and names the path.
func ValidatePath(p string) error {
	bad := func(why string) error { return fmt.Errorf("%w %q: %s", ErrInvalidPath, p, why) }
	if p == "" {
		return bad("empty path")
	}
	if p[0] != '/' {
		return bad("must start with /")
	}
	if p == "/" {
		return nil
	}
	if strings.HasSuffix(p, "/") {
		return bad("trailing slash")
	}
	for _, seg := range strings.Split(p[1:], "/") {
		switch seg {
		case "":
			return bad("empty segment")
		case ".", "..":
			return bad("relative segment " + seg)
		}
	}
	for _, r := range p {
		if r == 0 || (r > 0 && r < 0x20) || r == 0x7f || (r >= 0xd800 && r <= 0xf8ff) || (r >= 0xfff0 && r <= 0xffff) {
			return bad(fmt.Sprintf("forbidden character %U", r))
		}
	}
	return nil
}

// ParentPath returns the parent of a valid path ("/" for a top-level node
// and for "/" itself).
func ParentPath(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

// BaseName returns the last segment of a valid path ("" for "/").
func BaseName(p string) string {
	return p[strings.LastIndexByte(p, '/')+1:]
}

// JoinPath joins a parent path and child names.
func JoinPath(parent string, names ...string) string {
	parent = strings.TrimSuffix(parent, "/")
	size := len(parent)
	for _, n := range names {
		size += 1 + len(n)
	}
	if size == 0 {
		return "/"
	}
	var b strings.Builder
	b.Grow(size) // one allocation: paths are built on every catalog read
	b.WriteString(parent)
	for _, n := range names {
		b.WriteByte('/')
		b.WriteString(n)
	}
	return b.String()
}

// HasPrefixPath reports whether p is prefix itself or lies below it. The
// prefix "/" matches every path. "/a/b" is below "/a" but not below "/a/b"'s
// sibling "/a/bc".
func HasPrefixPath(p, prefix string) bool {
	if prefix == "/" || p == prefix {
		return true
	}
	return strings.HasPrefix(p, prefix) && len(p) > len(prefix) && p[len(prefix)] == '/'
}

// SequentialSuffix formats a sequence number as the 10-digit zero-padded
// suffix that sequential nodes get, as ZooKeeper formats it.
func SequentialSuffix(seq int64) string {
	return fmt.Sprintf("%010d", seq)
}
