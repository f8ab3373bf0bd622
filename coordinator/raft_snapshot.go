package coordinator

import (
	"bytes"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/migrate"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// snapshotChunk is the size of one SaveRaftSnapshot message's chunk.
const snapshotChunk = 1 << 20

// SaveRaftSnapshot (leader only; a standby answers NOT_LEADER) streams a
// backup of the tree: migrate.Export of the backend (every persistent
// node at one revision), with the cluster id and this leadership's epoch
// in the header, written as a tree file and sent in chunks, each carrying
// the file's size. The file is built in memory before the first chunk is
// sent (the tree is the leader's metadata, which its image holds in memory
// anyway).
func (a *adminService) SaveRaftSnapshot(_ *adminv1.SaveRaftSnapshotRequest, stream adminv1.AdminService_SaveRaftSnapshotServer) error {
	l, err := a.s.serving()
	if err != nil {
		return err
	}
	ctx := stream.Context()
	var tree *migrate.Tree
	if err := a.s.metrics.timeCall("SaveSnapshot", func() error {
		var err error
		tree, err = migrate.Export(ctx, l.b)
		return err
	}); err != nil {
		return a.s.mapErr(err)
	}
	if st, err := l.b.Status(ctx); err == nil {
		tree.Header.ClusterID = st.ClusterID
	}
	tree.Header.Epoch = l.lead.Epoch()
	var buf bytes.Buffer
	if err := tree.Write(&buf); err != nil {
		return adminclient.ToStatus(err)
	}
	b := buf.Bytes()
	total := int64(len(b))
	for len(b) > 0 {
		n := min(len(b), snapshotChunk)
		if err := stream.Send(&adminv1.SaveRaftSnapshotResponse{Chunk: b[:n], TotalBytes: total,
			Nodes: int64(len(tree.Nodes)), Revision: tree.Header.Revision}); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}
