#!/usr/bin/env bash
# Regenerates every generated file from proto/: the Go code in gen/ (buf with
# the pinned protoc-gen-go, protoc-gen-go-grpc and protoc-gen-grpc-gateway),
# the OpenAPI document in httpapi/openapi/ (protoc-gen-openapiv2; both take
# the HTTP rules of proto/sessiond/v1/sessiond_http.yaml) and the Python stubs in
# gen/python (scripts/gen-python.sh). buf.gen.yaml cleans gen/ first, so
# the Python stubs must be made after it. Run scripts/tools.sh once first.
set -euo pipefail

cd "$(dirname "$0")/.."
export PATH="$(go env GOPATH | cut -d: -f1)/bin:$PATH"

buf generate
if [[ -f scripts/gen-python.sh ]]; then
	bash scripts/gen-python.sh
fi
