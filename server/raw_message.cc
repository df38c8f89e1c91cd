// Raw message helpers; see raw_message.h.
#include "server/raw_message.h"

#include <google/protobuf/stubs/logging.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>
#include <grpcpp/impl/codegen/proto_utils.h>

#include "absl/strings/str_cat.h"

namespace tnmt::server {

absl::Status ParseMessage(const grpc::ByteBuffer& bytes, google::protobuf::Message* m, absl::string_view what) {
  grpc::ByteBuffer shared(bytes);  // shares the slices; the reader needs a mutable buffer
  bool parsed = false;
  {
    grpc::ProtoBufferReader reader(&shared);
    google::protobuf::LogSilencer quiet;  // the error below says it; no libprotobuf ERROR line per bad call
    parsed = reader.status().ok() && m->ParseFromZeroCopyStream(&reader);
  }
  if (!parsed) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", bytes.Length(), " bytes that do not parse as ",
                                                   m->GetTypeName(), " (string fields such as model must be UTF-8)"));
  }
  return absl::OkStatus();
}

grpc::ByteBuffer Serialize(const google::protobuf::Message& m) {
  grpc::ByteBuffer out;
  bool own = false;
  grpc::SerializationTraits<google::protobuf::Message>::Serialize(m, &out, &own);
  return out;
}

}  // namespace tnmt::server
