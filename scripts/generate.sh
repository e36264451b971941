#!/usr/bin/env bash
# Regenerates every generated file from proto/: the Go messages and gRPC
# stubs of the gen module in gen/sessiond/v1 (buf with the pinned
# protoc-gen-go and protoc-gen-go-grpc), the JSON gateway in
# httpapi/gateway/sessiond/v1 (protoc-gen-grpc-gateway) and the OpenAPI
# document in httpapi/openapi/ (protoc-gen-openapiv2; both take the HTTP
# rules of proto/sessiond/v1/sessiond_http.yaml), and the Python stubs in
# gen/python (scripts/gen-python.sh). Run scripts/tools.sh once first.
set -euo pipefail

cd "$(dirname "$0")/.."
export PATH="$(go env GOPATH | cut -d: -f1)/bin:$PATH"

# gen/ also holds hand-written files (go.mod, msgcheck), so buf cleans
# nothing: the generated files go first, so that none outlives its proto.
rm -f gen/sessiond/v1/*.pb.go httpapi/gateway/sessiond/v1/*.pb.gw.go httpapi/openapi/*.swagger.json
buf generate
if [[ -f scripts/gen-python.sh ]]; then
	bash scripts/gen-python.sh
fi
