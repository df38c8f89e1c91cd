// Error mapping; see status_mapping.h.
#include "server/status_mapping.h"

#include "absl/strings/str_cat.h"

#include <optional>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "proto/google/rpc/error_details.pb.h"
#include "proto/google/rpc/status.pb.h"

namespace tnmt::server {

namespace {

constexpr char kTypePrefix[] = "type.googleapis.com/";

std::string TypeUrl(const google::protobuf::Message& m) { return kTypePrefix + m.GetTypeName(); }

absl::Status Attach(absl::Status s, const google::protobuf::Message& detail) {
  if (s.ok()) return s;
  s.SetPayload(TypeUrl(detail), absl::Cord(detail.SerializeAsString()));
  return s;
}

}  // namespace

absl::Status WithReason(absl::Status s, const std::string& reason) {
  google::rpc::ErrorInfo info;
  info.set_reason(reason);
  info.set_domain(kErrorDomain);
  return Attach(std::move(s), info);
}

absl::Status WithRetryDelay(absl::Status s, absl::Duration delay) {
  google::rpc::RetryInfo retry;
  const int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(delay, absl::Milliseconds(1)));
  retry.mutable_retry_delay()->set_seconds(ms / 1000);
  retry.mutable_retry_delay()->set_nanos(static_cast<int32_t>(ms % 1000) * 1000000);
  return Attach(std::move(s), retry);
}

absl::Status WithFieldViolation(absl::Status s, const std::string& field) {
  google::rpc::BadRequest bad;
  google::rpc::BadRequest::FieldViolation* v = bad.add_field_violations();
  v->set_field(field);
  v->set_description(std::string(s.message()));
  return Attach(std::move(s), bad);
}

std::string ReasonOf(const absl::Status& s) {
  const auto payload = s.GetPayload(TypeUrl(google::rpc::ErrorInfo()));
  google::rpc::ErrorInfo info;
  if (!payload.has_value() || !info.ParseFromString(std::string(*payload))) return "";
  return info.reason();
}

std::string FieldOf(absl::string_view message) {
  const size_t colon = message.find(": ");
  if (colon == absl::string_view::npos || colon == 0 || colon > 64) return "";
  const absl::string_view field = message.substr(0, colon);
  // A field path: name(.name)* with optional [index] after each name.
  bool name_start = true;
  for (size_t i = 0; i < field.size(); ++i) {
    const char c = field[i];
    if (c >= 'a' && c <= 'z') {
      name_start = false;
    } else if ((c == '_' || (c >= '0' && c <= '9')) && !name_start) {
    } else if (c == '.' && !name_start) {
      name_start = true;
    } else if (c == '[' && !name_start) {
      const size_t close = field.find(']', i);
      if (close == absl::string_view::npos || close == i + 1) return "";
      for (size_t j = i + 1; j < close; ++j) {
        if (field[j] < '0' || field[j] > '9') return "";
      }
      i = close;
    } else {
      return "";
    }
  }
  return name_start ? "" : std::string(field);
}

grpc::Status ToGrpcStatus(const absl::Status& s) {
  const auto code = static_cast<grpc::StatusCode>(s.code());
  google::rpc::Status details;
  // A refused request names its field first ("texts[3]: ...", "options.beam_size: ..."): the
  // same as a google.rpc.BadRequest field violation.
  const std::string field = s.code() == absl::StatusCode::kInvalidArgument ? FieldOf(s.message()) : "";
  if (!field.empty() && !s.GetPayload(TypeUrl(google::rpc::BadRequest())).has_value()) {
    google::rpc::BadRequest bad;
    google::rpc::BadRequest::FieldViolation* v = bad.add_field_violations();
    v->set_field(field);
    v->set_description(std::string(s.message().substr(field.size() + 2)));
    google::protobuf::Any* any = details.add_details();
    any->set_type_url(TypeUrl(bad));
    any->set_value(bad.SerializeAsString());
  }
  s.ForEachPayload([&](absl::string_view type_url, const absl::Cord& value) {
    if (!absl::StartsWith(type_url, kTypePrefix)) return;
    google::protobuf::Any* any = details.add_details();
    any->set_type_url(std::string(type_url));
    any->set_value(std::string(value));
  });
  if (details.details_size() == 0) return grpc::Status(code, std::string(s.message()));
  details.set_code(static_cast<int32_t>(s.code()));
  details.set_message(std::string(s.message()));
  return grpc::Status(code, std::string(s.message()), details.SerializeAsString());
}

int HttpStatusFor(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return 200;
    case grpc::StatusCode::CANCELLED: return 499;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE: return 400;
    case grpc::StatusCode::DEADLINE_EXCEEDED: return 504;
    case grpc::StatusCode::NOT_FOUND: return 404;
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::ABORTED: return 409;
    case grpc::StatusCode::PERMISSION_DENIED: return 403;
    case grpc::StatusCode::UNAUTHENTICATED: return 401;
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return 429;
    case grpc::StatusCode::UNIMPLEMENTED: return 501;
    case grpc::StatusCode::UNAVAILABLE: return 503;
    default: return 500;  // UNKNOWN, INTERNAL, DATA_LOSS
  }
}

std::string CodeName(grpc::StatusCode code) {
  // gRPC's and absl's codes are the same numbers with the same names.
  const std::string name = absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  return name.empty() ? absl::StrCat("CODE_", static_cast<int>(code)) : name;
}

grpc::StatusCode GrpcCodeForHttpStatus(int http_status) {
  switch (http_status) {
    case 400: return grpc::StatusCode::INVALID_ARGUMENT;
    case 401: return grpc::StatusCode::UNAUTHENTICATED;
    case 403: return grpc::StatusCode::PERMISSION_DENIED;
    case 404: return grpc::StatusCode::NOT_FOUND;
    case 413:
    case 429: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case 500: return grpc::StatusCode::INTERNAL;
    case 501: return grpc::StatusCode::UNIMPLEMENTED;
    case 503: return grpc::StatusCode::UNAVAILABLE;
    case 504: return grpc::StatusCode::DEADLINE_EXCEEDED;
    default: return grpc::StatusCode::UNKNOWN;
  }
}

}  // namespace tnmt::server
