// Package memory is metaplane's reference metadata backend: the whole
// core.MetadataBackend contract held in the memory of one process.
//
// It is for tests and as the example third parties read when they write a
// backend. It is not for production: nothing is durable (a restart loses
// everything), it is not replicated, and every client must live in the same
// process as its Store.
//
// A Store is the shared state (the node tree, the revision counter, the
// bounded change history, the sessions, the leases and the leader
// election); each Backend made by Store.NewClient is one client with a
// session of its own, exactly as one ZooKeeper connection or one Raft
// client would be. Provider wraps a Store for the plugin host.
//
// Choices this backend makes where the contract leaves room, documented in
// docs/conformance.md too:
//
//   - Revisions are a counter starting at 1; every committed transaction
//     (including one made only of checks) takes exactly one revision, and
//     so do the deletions caused by a session's or lease's end.
//   - A sequential create's suffix is the parent's child-change counter
//     (ZooKeeper's cversion): it grows with every create and delete of a
//     child of that parent. A sequential create's path is validated with
//     its suffix appended, so "/parent/" is accepted and yields
//     "/parent/0000000007".
//   - A child of an ephemeral node is refused with core.ErrNoParent (the
//     contract has no NoChildrenForEphemerals sentinel).
//   - The root "/" always exists: creating it fails with
//     core.ErrNodeExists, deleting it with core.ErrInvalidArgument.
//   - Session and lease ids share one id space, so an ephemeral node's
//     Stat.EphemeralOwner is its session's or its lease's id.
//   - A client renews its own session from a background ticker while it is
//     open; the session therefore only expires through ExpireSession or
//     after PauseHeartbeats. On expiry the ephemerals go in one revision,
//     SessionExpired is delivered, a new session is established and
//     SessionConnected follows.
//   - ObserveLeader delivers leaders only: a period without a leader is
//     not reported.
//   - The election is first come, first served: candidates are elected in
//     the order they campaigned; the first leader of a store has epoch 0.
package memory
