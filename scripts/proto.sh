#!/usr/bin/env bash
# Regenerates the Go code of every .proto file under proto/ (`make proto`),
# or, with --check, regenerates into a temporary copy and fails when the
# committed code differs (`make proto-check`, run by CI).
#
# The generators are pinned and installed when missing: protoc from Debian's
# protobuf-compiler package, protoc-gen-go, protoc-gen-go-grpc and
# protoc-gen-go-vtproto from the Go module proxy into $(go env GOPATH)/bin.
# protoc-gen-go-vtproto writes each message's reflection-free Marshal,
# Unmarshal and Size (*_vtproto.pb.go); its version is the one of the
# vtprotobuf module go.mod requires, whose runtime helpers that code imports.
set -euo pipefail
cd "$(dirname "$0")/.."

PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.1
VTPROTO_MODULE=github.com/planetscale/vtprotobuf
VTPROTO_VERSION=$(go list -m -f '{{.Version}}' "$VTPROTO_MODULE")

GOBIN_DIR="$(go env GOPATH)/bin"
export PATH="$GOBIN_DIR:$PATH"

ensure_protoc() {
	if command -v protoc >/dev/null 2>&1; then return; fi
	local sudo=""
	if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
	echo "installing protoc (Debian package protobuf-compiler)" >&2
	export DEBIAN_FRONTEND=noninteractive
	$sudo apt-get update -qq
	$sudo apt-get install -y -qq --no-install-recommends protobuf-compiler >/dev/null
}

# ensure_gen BINARY MODULE VERSION: installs BINARY unless the installed one
# reports VERSION.
ensure_gen() {
	local bin=$1 module=$2 version=$3
	if command -v "$bin" >/dev/null 2>&1 && "$bin" --version 2>/dev/null | grep -q "${version#v}"; then
		return
	fi
	echo "installing $module@$version into $GOBIN_DIR" >&2
	GOFLAGS= GOBIN="$GOBIN_DIR" go install "$module@$version"
}

# ensure_vtproto installs protoc-gen-go-vtproto unless the installed one
# was built from VTPROTO_VERSION (it has no --version flag; the binary's
# build information names its module's version).
ensure_vtproto() {
	local bin="$GOBIN_DIR/protoc-gen-go-vtproto"
	if [ -x "$bin" ] && go version -m "$bin" 2>/dev/null | grep -q "mod[[:space:]]*$VTPROTO_MODULE[[:space:]]*$VTPROTO_VERSION"; then
		return
	fi
	echo "installing $VTPROTO_MODULE/cmd/protoc-gen-go-vtproto@$VTPROTO_VERSION into $GOBIN_DIR" >&2
	GOFLAGS= GOBIN="$GOBIN_DIR" go install "$VTPROTO_MODULE/cmd/protoc-gen-go-vtproto@$VTPROTO_VERSION"
}

ensure_protoc
ensure_gen protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION"
ensure_gen protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"
ensure_vtproto

# VTPROTO_OPTS: the vtproto generator's options (no object pools, no Equal
# or Clone: only the codec's three methods).
VTPROTO_OPTS="--go-vtproto_opt=paths=source_relative --go-vtproto_opt=features=marshal+unmarshal+size"

# The include root of a .proto file is proto/ (it is registered as
# metaplane/v1/backend.proto), the convention for new files. A file whose
# committed Go code was generated from the repository root (registered as
# proto/metaplane/...) keeps that root, so that regenerating it changes
# nothing; the two conventions must not import each other.
include_root() {
	local pb="proto/${1%.proto}.pb.go"
	if [ -f "$pb" ] && grep -q '^// source: proto/' "$pb"; then
		echo repo
	else
		echo proto
	fi
}

# generate SRC_ROOT: runs protoc over every .proto under SRC_ROOT/proto,
# writing the Go files beside their sources.
generate() {
	local root=$1
	local files f
	local -a under_proto=() under_repo=()
	mapfile -t files < <(cd "$root/proto" && find . -name '*.proto' | sed 's|^\./||' | sort)
	for f in "${files[@]}"; do
		if [ "$(include_root "$f")" = repo ]; then
			under_repo+=("proto/$f")
		else
			under_proto+=("$f")
		fi
	done
	if [ ${#under_proto[@]} -gt 0 ]; then
		(cd "$root/proto" && protoc -I . \
			--go_out=. --go_opt=paths=source_relative \
			--go-grpc_out=. --go-grpc_opt=paths=source_relative \
			--go-vtproto_out=. $VTPROTO_OPTS \
			"${under_proto[@]}")
	fi
	if [ ${#under_repo[@]} -gt 0 ]; then
		(cd "$root" && protoc -I . \
			--go_out=. --go_opt=paths=source_relative \
			--go-grpc_out=. --go-grpc_opt=paths=source_relative \
			--go-vtproto_out=. $VTPROTO_OPTS \
			"${under_repo[@]}")
	fi
}

if [ "${1:-}" = "--check" ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	cp -r proto "$tmp/proto"
	generate "$tmp"
	# The generators' version comment lines are ignored: a different protoc
	# release writes the same code.
	if ! diff -r -I '^// .*protoc' proto "$tmp/proto"; then
		echo "proto-check: the generated code under proto/ is stale; run 'make proto' and commit the result" >&2
		exit 1
	fi
	echo "proto-check: generated code is up to date"
	exit 0
fi

generate .
