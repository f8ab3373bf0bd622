// Package lint holds repository-wide checks that run as tests: the layering
// rules of docs/architecture.md (core imports no backend, plugin or gRPC
// code; conformance imports no backend; a backend imports no plugin code
// and no other backend; internal/fanout imports the standard library only).
// It has no non-test code.
package lint
