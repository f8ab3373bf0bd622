package catalog

import (
	"encoding/json"
)

// LakeTable is the value of /tabletservers/tables/<tableId>/laketable
// (version 2): the table's lake snapshots, each naming the files that hold
// its offsets (the offsets themselves live in those files, not here).
//
// The shape follows the original system's LakeTableJsonSerde
// (org.apache.fluss.server.zk.data.lake in the Apache Fluss source), which
// ../shared/FLUSS_LAYOUT.md lists without an example: "version" 2, then
// "lake_snapshots", an array (always written, [] when empty) of objects
// with "snapshot_id" (a JSON number, a Java long), "tiered_offsets" (a
// string: the path of the tiered-offsets file, always written),
// "readable_offsets" (a string path, written only when there is one) and,
// in newer versions of the original, "commit_timestamp" (a number, written
// only when known). The original still reads a version 1 node (the whole
// snapshot inline); this type does not, and reports it as a bad record.
type LakeTable struct {
	Snapshots []LakeSnapshot
}

// LakeSnapshot is one entry of LakeTable.Snapshots.
type LakeSnapshot struct {
	SnapshotID int64
	// TieredOffsets is the path of the file holding the snapshot's tiered
	// offsets. Required.
	TieredOffsets string
	// ReadableOffsets is the path of the file holding the readable
	// offsets; "" when there is none (the field is then omitted).
	ReadableOffsets string
	// CommitTimestamp is the lake commit's time in milliseconds when the
	// writer recorded it; nil when absent (the field is then omitted, as
	// the original omits an unknown one).
	CommitTimestamp *int64
}

// Marshal encodes the lake table as the original does.
func (l LakeTable) Marshal() []byte {
	var w jw
	w.open('{')
	w.fieldInt("version", 2)
	w.key("lake_snapshots")
	w.open('[')
	for _, s := range l.Snapshots {
		w.sep()
		w.open('{')
		w.fieldInt("snapshot_id", s.SnapshotID)
		w.fieldStr("tiered_offsets", s.TieredOffsets)
		if s.ReadableOffsets != "" {
			w.fieldStr("readable_offsets", s.ReadableOffsets)
		}
		if s.CommitTimestamp != nil {
			w.fieldInt("commit_timestamp", *s.CommitTimestamp)
		}
		w.close('}')
	}
	w.close(']')
	w.val()
	w.close('}')
	return w.bytes()
}

// UnmarshalLakeTable decodes a LakeTable v2. Errors wrap ErrBadRecord: an
// empty or malformed value, a version other than 2 (version 1, the legacy
// inline snapshot, is named as such), a missing or non-array
// "lake_snapshots", or an entry without "snapshot_id" or "tiered_offsets"
// (the entry's index is named).
func UnmarshalLakeTable(b []byte) (LakeTable, error) {
	const what = "lake table"
	var v struct {
		Version   int             `json:"version"`
		Snapshots json.RawMessage `json:"lake_snapshots"`
	}
	if len(b) == 0 {
		return LakeTable{}, formatError(what, "empty value")
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return LakeTable{}, formatError(what, "%v", err)
	}
	if v.Version == 1 {
		return LakeTable{}, formatError(what, "version 1 (the legacy inline snapshot) is not supported, want 2")
	}
	if v.Version != 2 {
		return LakeTable{}, formatError(what, "version %d, want 2", v.Version)
	}
	if len(v.Snapshots) == 0 || string(v.Snapshots) == "null" || v.Snapshots[0] != '[' {
		return LakeTable{}, formatError(what, `"lake_snapshots" must be an array`)
	}
	var entries []struct {
		SnapshotID      *int64  `json:"snapshot_id"`
		TieredOffsets   *string `json:"tiered_offsets"`
		ReadableOffsets *string `json:"readable_offsets"`
		CommitTimestamp *int64  `json:"commit_timestamp"`
	}
	if err := json.Unmarshal(v.Snapshots, &entries); err != nil {
		return LakeTable{}, formatError(what, "lake_snapshots: %v", err)
	}
	out := LakeTable{Snapshots: make([]LakeSnapshot, 0, len(entries))}
	for i, e := range entries {
		if e.SnapshotID == nil {
			return LakeTable{}, formatError(what, "lake_snapshots[%d] has no snapshot_id", i)
		}
		if e.TieredOffsets == nil {
			return LakeTable{}, formatError(what, "lake_snapshots[%d] has no tiered_offsets", i)
		}
		s := LakeSnapshot{SnapshotID: *e.SnapshotID, TieredOffsets: *e.TieredOffsets, CommitTimestamp: e.CommitTimestamp}
		if e.ReadableOffsets != nil {
			s.ReadableOffsets = *e.ReadableOffsets
		}
		out.Snapshots = append(out.Snapshots, s)
	}
	return out, nil
}
