// Package core holds metaplane's contract with its metadata backends
// (MetadataBackend and its optional parts), the sentinel errors, path rules,
// configuration loading and the backend selector, the typed catalog of
// Fluss-compatible records, the coordinator's metadata image and the block
// id allocator.
//
// core imports no backend, no plugin code and no gRPC; a test enforces it.
package core
