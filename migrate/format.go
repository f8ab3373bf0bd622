// Package migrate moves a metadata tree between backends, any to any,
// written against the contract only (core.MetadataBackend): export a
// source's persistent nodes to a tree file, import a tree file into an
// empty target (in bulk through core.Importer where the target has it,
// keeping versions where it declares so), and validate a target against a
// tree file byte for byte. Ephemeral nodes are never copied: their owners
// (coordinators, tablet servers) recreate them in the target.
//
// The tree file is JSON lines: a header, one line per node, parents before
// children (ExportSnapshot and Tree.Write keep path order; ExportFile's
// streaming walk does not), and a trailer carrying the node count and the
// SHA-256 of every line before it, so a truncated or corrupted file is
// refused before anything is written (see docs/migration.md).
package migrate

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
	"time"

	"github.com/metaplane/metaplane/core"
)

// Format and FormatVersion name the tree file's format in its header.
const (
	Format        = "metaplane-tree"
	FormatVersion = 1
)

// ErrBadFile is wrapped by every error about a tree file that cannot be
// used (not a tree file, a newer version, truncated, corrupted).
var ErrBadFile = errors.New("migrate: bad tree file")

// Header is the first line of a tree file.
type Header struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	// Source is the backend the tree was read from ("zookeeper", "raft").
	Source string `json:"source"`
	// Revision is the source's revision the tree was read at (one
	// consistent snapshot).
	Revision int64 `json:"revision"`
	// Created is when the export was taken.
	Created time.Time `json:"created"`
	// ClusterID and Epoch, when set, are the source quorum's cluster id
	// and the leader epoch of the coordinator that read the tree (a Raft
	// snapshot sets them, for operators; the epochs continue through the
	// /coordinators/epoch node). Older files have neither.
	ClusterID string `json:"cluster_id,omitempty"`
	Epoch     int64  `json:"epoch,omitempty"`
	// Sorted says the nodes are in byte order of their paths (streamed
	// exports write them so): Scan then checks the order holding only the
	// ancestors of the latest node, not a hash per node. Older files, and
	// those of a streaming walk, have it false (readers of version 1
	// ignore the field: the files stay version 1).
	Sorted bool `json:"sorted,omitempty"`
}

// Node is one persistent node of a tree file.
type Node struct {
	Path    string `json:"path"`
	Data    []byte `json:"data"`
	Version int64  `json:"version"`
	// CreateTime and ModifyTime are milliseconds since the Unix epoch.
	CreateTime int64 `json:"ctime"`
	ModifyTime int64 `json:"mtime"`
	// NextSequence is the suffix the node's next sequential child gets on
	// the source (one more than the highest 10-digit suffix among its
	// children), 0 when it has none.
	NextSequence int64 `json:"next_sequence,omitempty"`
}

// ImportNode is n as a core.Importer loads it.
func (n *Node) ImportNode() core.ImportNode {
	return core.ImportNode{Path: n.Path, Data: n.Data, Version: n.Version,
		CreateTime: n.CreateTime, ModifyTime: n.ModifyTime, NextSequence: n.NextSequence}
}

// trailer is the last line of a tree file.
type trailer struct {
	End    bool   `json:"end"`
	Nodes  int    `json:"nodes"`
	SHA256 string `json:"sha256"`
}

// Tree is a tree file's content: the header and the nodes in path order.
type Tree struct {
	Header Header
	Nodes  []Node
	// Ephemerals is how many ephemeral nodes Export left out (not part of
	// the file: a tree read from a file has 0).
	Ephemerals int
	// SHA256 is the checksum of the trailer (hex), set by Read and by
	// Write.
	SHA256 string
}

// Write writes t as a tree file.
func (t *Tree) Write(w io.Writer) error {
	tw, err := NewWriter(w, t.Header)
	if err != nil {
		return err
	}
	for i := range t.Nodes {
		if err := tw.Node(&t.Nodes[i]); err != nil {
			return err
		}
	}
	err = tw.Close()
	t.SHA256 = tw.SHA256()
	return err
}

// Writer writes a tree file one node at a time (constant memory): the
// header at NewWriter, a line per Node, the trailer (count and checksum)
// at Close. The caller gives the nodes parents first.
type Writer struct {
	bw    *bufio.Writer
	h     hash.Hash
	nodes int
	sum   string
}

// NewWriter writes hd (its Format and Version set) to w and returns a
// Writer for the nodes.
func NewWriter(w io.Writer, hd Header) (*Writer, error) {
	tw := &Writer{bw: bufio.NewWriter(w), h: sha256.New()}
	hd.Format, hd.Version = Format, FormatVersion
	return tw, tw.line(hd)
}

func (tw *Writer) line(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	tw.h.Write(b)
	_, err = tw.bw.Write(b)
	return err
}

// Node writes one node line.
func (tw *Writer) Node(n *Node) error {
	tw.nodes++
	return tw.line(n)
}

// Nodes is how many node lines were written.
func (tw *Writer) Nodes() int { return tw.nodes }

// SHA256 is the checksum the trailer carries (hex), once Close ran.
func (tw *Writer) SHA256() string { return tw.sum }

// Close writes the trailer and flushes (it does not close the underlying
// writer).
func (tw *Writer) Close() error {
	tw.sum = hex.EncodeToString(tw.h.Sum(nil))
	b, err := json.Marshal(trailer{End: true, Nodes: tw.nodes, SHA256: tw.sum})
	if err != nil {
		return err
	}
	if _, err := tw.bw.Write(append(b, '\n')); err != nil {
		return err
	}
	return tw.bw.Flush()
}

// maxLine bounds one line of a tree file: a node of the largest value any
// backend accepts (1 MiB), base64-encoded, with its path and stat.
const maxLine = 4 << 20

// Read reads and checks a whole tree file into memory (Scan's checks):
// for small trees and tests; the verbs stream (Scan, ImportFile,
// ValidateFile). Errors wrap ErrBadFile.
func Read(r io.Reader) (*Tree, error) {
	var t Tree
	info, err := Scan(r, func(n *Node) error {
		t.Nodes = append(t.Nodes, *n)
		return nil
	})
	if err != nil {
		return nil, err
	}
	t.Header, t.SHA256 = info.Header, info.SHA256
	return &t, nil
}

// FileInfo is what Scan found in a whole, well-formed tree file.
type FileInfo struct {
	Header Header
	Nodes  int
	SHA256 string
}

// Scan reads a tree file line by line and checks all of it: the header's
// format and version, every line, the node order (parents before
// children, no duplicates), the count and the checksum. It calls fn, when
// set, with each node as it is read (before the trailer is checked: a
// caller that must not act on a bad file scans it once without fn
// first). Its memory is one line and, for a file whose header says Sorted,
// the nodes whose paths are prefixes of the latest one (constant in the
// tree's size; the order is checked too), else 16 bytes per node (a hash
// of the path, for the order); never the nodes. Errors wrap ErrBadFile and say
// what is wrong and where; fn's error is returned as it is.
func Scan(r io.Reader, fn func(*Node) error) (FileInfo, error) {
	var info FileInfo
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	h := sha256.New()
	lineNo := 0
	next := func() ([]byte, bool) {
		if !sc.Scan() {
			return nil, false
		}
		lineNo++
		return sc.Bytes(), true
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: line %d: %s", ErrBadFile, lineNo, fmt.Sprintf(format, args...))
	}
	b, ok := next()
	if !ok {
		if err := sc.Err(); err != nil {
			return info, fmt.Errorf("%w: %v", ErrBadFile, err)
		}
		return info, fmt.Errorf("%w: empty file", ErrBadFile)
	}
	if err := json.Unmarshal(b, &info.Header); err != nil || info.Header.Format != Format {
		return info, bad("not a %s file (its first line is not a %s header)", Format, Format)
	}
	if info.Header.Version != FormatVersion {
		return info, bad("format version %d, this metaplane reads version %d", info.Header.Version, FormatVersion)
	}
	hashLine(h, b)
	seen := pathSet{}
	seen.add("/")
	sorted := info.Header.Sorted
	// open: for a sorted file, the nodes read that are byte prefixes of
	// the latest (every parent is one of its children's).
	open := []string{"/"}
	prev := ""
	for {
		b, ok := next()
		if !ok {
			if err := sc.Err(); err != nil {
				return info, fmt.Errorf("%w: line %d: %v", ErrBadFile, lineNo+1, err)
			}
			return info, fmt.Errorf("%w: truncated after %d nodes: no trailer line", ErrBadFile, info.Nodes)
		}
		var tr trailer
		if json.Unmarshal(b, &tr) == nil && tr.End {
			if tr.Nodes != info.Nodes {
				return info, bad("the trailer counts %d nodes, the file holds %d", tr.Nodes, info.Nodes)
			}
			if sum := hex.EncodeToString(h.Sum(nil)); sum != tr.SHA256 {
				return info, bad("checksum mismatch: the file's lines hash to %s, the trailer says %s (corrupted)", sum, tr.SHA256)
			}
			if _, more := next(); more {
				return info, bad("data after the trailer")
			}
			info.SHA256 = tr.SHA256
			return info, nil
		}
		var n Node
		if err := json.Unmarshal(b, &n); err != nil || n.Path == "" {
			return info, bad("not a node line")
		}
		if sorted {
			if n.Path <= prev {
				return info, bad("node %s after %s in a file whose header says its paths are sorted", n.Path, prev)
			}
			prev = n.Path
			for len(open) > 1 && !strings.HasPrefix(n.Path, open[len(open)-1]) {
				open = open[:len(open)-1]
			}
			parent := parentOf(n.Path)
			found := false
			for i := len(open) - 1; i >= 0 && !found; i-- {
				found = open[i] == parent
			}
			if !found {
				return info, bad("node %s comes before its parent %s", n.Path, parent)
			}
			open = append(open, n.Path)
		} else {
			if seen.has(n.Path) {
				return info, bad("node %s appears twice", n.Path)
			}
			if !seen.has(parentOf(n.Path)) {
				return info, bad("node %s comes before its parent %s", n.Path, parentOf(n.Path))
			}
			seen.add(n.Path)
		}
		hashLine(h, b)
		info.Nodes++
		if fn != nil {
			if err := fn(&n); err != nil {
				return info, err
			}
		}
	}
}

// pathSet is a set of paths held as 16-byte hashes (SHA-256, truncated):
// a file's paths without their bytes.
type pathSet map[[16]byte]struct{}

func pathKey(p string) [16]byte {
	sum := sha256.Sum256([]byte(p))
	return [16]byte(sum[:16])
}

func (s pathSet) add(p string)      { s[pathKey(p)] = struct{}{} }
func (s pathSet) has(p string) bool { _, ok := s[pathKey(p)]; return ok }

func hashLine(h hash.Hash, b []byte) {
	h.Write(b)
	h.Write([]byte{'\n'})
}

// parentOf is core.ParentPath without its validation (Read validates the
// order only; Import validates paths).
func parentOf(p string) string {
	for i := len(p) - 1; i > 0; i-- {
		if p[i] == '/' {
			return p[:i]
		}
	}
	return "/"
}
