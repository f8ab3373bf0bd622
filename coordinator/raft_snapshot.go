package coordinator

import (
	"io"
	"os"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/metaplane/metaplane/migrate"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// snapshotChunk is the size of one SaveRaftSnapshot message's chunk.
const snapshotChunk = 1 << 20

// SaveRaftSnapshot (leader only; a standby answers NOT_LEADER) streams a
// backup of the tree: migrate.ExportSnapshot of the backend (every
// persistent node at one revision: one streamed snapshot, as a serving
// quorum's revision moves with every session renewal), with the cluster
// id and this leadership's epoch in the header, written as a tree file to
// a temporary file and then sent from it in chunks, each carrying the
// file's size. Neither the tree nor the file is held: the snapshot's
// pages pass through a spill file into the tree file (memory bounded by a
// page and the ancestors of the node being written, on a backend that
// declares core.SnapshotStreamer). The temporary files are removed when
// the call ends.
func (a *adminService) SaveRaftSnapshot(_ *adminv1.SaveRaftSnapshotRequest, stream adminv1.AdminService_SaveRaftSnapshotServer) error {
	l, err := a.s.serving()
	if err != nil {
		return err
	}
	ctx := stream.Context()
	f, err := os.CreateTemp("", "metaplane-snapshot-*.jsonl")
	if err != nil {
		return adminapi.ToStatus(err)
	}
	defer func() { f.Close(); os.Remove(f.Name()) }()
	o := migrate.ExportOptions{Epoch: l.lead.Epoch()}
	if st, err := l.b.Status(ctx); err == nil {
		o.ClusterID = st.ClusterID
	}
	var res migrate.ExportResult
	if err := a.s.metrics.timeCall("SaveSnapshot", func() error {
		var err error
		res, err = migrate.ExportSnapshot(ctx, l.b, f, o)
		return err
	}); err != nil {
		return err
	}
	total, err := f.Seek(0, io.SeekEnd)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		return adminapi.ToStatus(err)
	}
	buf := make([]byte, snapshotChunk)
	for {
		n, err := io.ReadFull(f, buf)
		if n > 0 {
			if err := stream.Send(&adminv1.SaveRaftSnapshotResponse{Chunk: buf[:n], TotalBytes: total,
				Nodes: int64(res.Nodes), Revision: res.Header.Revision}); err != nil {
				return err
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil
		}
		if err != nil {
			return adminapi.ToStatus(err)
		}
	}
}
