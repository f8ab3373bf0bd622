package core

// Config is metaplane's typed configuration: every key the design documents
// name, with their defaults. It is loaded and validated in one place (see
// LoadConfig). PLACEHOLDER: the configuration work fills this in.
type Config struct{}
