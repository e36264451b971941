// Command rpcprotos writes, on stdout, a FileDescriptorSet of
// google/rpc/status.proto and google/rpc/error_details.proto and the files
// they import, as compiled into the Go module google.golang.org/genproto.
// sessiond answers INVALID_ARGUMENT and RESOURCE_EXHAUSTED with
// google.rpc.BadRequest and ErrorInfo details; scripts/gen-python.sh feeds
// this set to protoc (--descriptor_set_in) to generate the Python modules
// that read them (gen/python/google/rpc), since the googleapis .proto
// sources are not on the machines that build sessiond. The Go descriptors
// are the same googleapis files, so the generated modules are the ones
// googleapis-common-protos ships.
//
// Usage: go run ./internal/rpcprotos > rpc.binpb
package main

import (
	"fmt"
	"os"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

func main() {
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	// add appends f after its imports, as protoc wants them.
	var add func(f protoreflect.FileDescriptor)
	add = func(f protoreflect.FileDescriptor) {
		if seen[f.Path()] {
			return
		}
		seen[f.Path()] = true
		imports := f.Imports()
		for i := range imports.Len() {
			add(imports.Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(f))
	}
	add(status.File_google_rpc_status_proto)
	add(errdetails.File_google_rpc_error_details_proto)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(set)
	if err == nil {
		_, err = os.Stdout.Write(b)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rpcprotos:", err)
		os.Exit(1)
	}
}
