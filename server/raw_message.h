// Protocol buffer messages to and from gRPC's raw byte buffers, for services that parse their
// own requests (so that a message that does not decode is answered INVALID_ARGUMENT naming it,
// not gRPC's generated UNIMPLEMENTED or INTERNAL).
#pragma once

#include <google/protobuf/message.h>
#include <grpcpp/support/byte_buffer.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tnmt::server {

// Parses `bytes` into `m` (read in place through gRPC's reader); `what` names the message in
// the INVALID_ARGUMENT error.
absl::Status ParseMessage(const grpc::ByteBuffer& bytes, google::protobuf::Message* m, absl::string_view what);

// A message's wire bytes, written by gRPC's own serializer.
grpc::ByteBuffer Serialize(const google::protobuf::Message& m);

}  // namespace tnmt::server
