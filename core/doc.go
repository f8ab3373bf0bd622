// Package core is metaplane's contract with its metadata backends, and only
// that: MetadataBackend and its optional parts (found with Optional), the
// types and ops of the key space, path rules, the sentinel errors, the
// Provider a backend offers its host, and the convenience calls built on
// the contract (Get, Create, AllocateIDs, BlockAllocator, ...).
//
// A third-party backend implements this package and nothing else. core
// imports the standard library only; a test (internal/lint) enforces it.
// The application's configuration, loader and backend selector live in
// config; the shared typed decoder of flat settings in settings;
// the typed catalog in catalog; the coordinator's metadata image in
// image.
package core
