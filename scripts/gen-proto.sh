#!/usr/bin/env bash
# Regenerates sb-api's gRPC code from its .proto (after editing
# crates/api/proto/scalebricks/v1/operator.proto): tools/protogen, its own workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --release --manifest-path tools/protogen/Cargo.toml
