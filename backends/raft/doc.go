// Package raft is metaplane's Raft metadata backend: an embedded quorum of
// the coordinators themselves, with Dragonboat for consensus and a Pebble
// store as the on-disk state machine.
//
// A process runs one voter (Provider.Start): a Dragonboat NodeHost on
// coordinator.raft.port and the state machine under coordinator.raft.dir.
// Clients of the voter (Provider.NewClient) are core.MetadataBackend values
// with a session each; they also implement core.LeaseManager,
// core.IDAllocator, core.MembershipManager and core.SessionExpirer, and
// serve the metadata stream (Client.FetchMetadata,
// Client.FetchMetadataSnapshot).
//
// Every change is a typed record (package proto/metaplane/raft/v1) appended
// to the Raft log and applied on commit: the state machine writes the tree
// changes, their change-log entries and the applied index in one synced
// Pebble batch, deterministically (times come in the record). Fences are
// checked at apply time against the last applied leader record; the epoch
// is the Raft term of that record. Reads are linearizable on every voter
// (ReadIndex) unless a caller asks for a stale read. Sessions are
// replicated leases whose clocks the Raft leader keeps. Snapshots streamed
// to lagging voters carry a SHA-256 of their body and are refused when it
// does not match.
//
// The backend's jobs live in packages of their own:
//   - backends/raft/fsm: the deterministic state machine (apply, snapshot,
//     queries, keys, the node cache, result codes), with no Dragonboat
//     node in it: it is driven by the entries it is given and testable
//     alone;
//   - backends/raft/logstore: the Raft log store (Dragonboat's Pebble LogDB
//     behind the lazy commit-index write);
//   - backends/raft (this package): the member (the NodeHost, the transport
//     with its leader watch, the disk guard, membership, leadership,
//     transfers, status) and its clients, and the offline tools the helper
//     binary metaplane-raft-offline runs;
//   - backends/raft/catchup: how far behind a voter may be and still count
//     as caught up, shared with the operator tools.
//
// docs/raft.md is the operator's guide: deployment, ports, TLS, disks,
// timing, every key, restart and join.
package raft
