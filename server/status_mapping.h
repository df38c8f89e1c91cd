// Errors from the server's code (absl::Status) to the wire: the one place that maps them.
// gRPC: the code and message, plus a google.rpc.Status in the grpc-status-details-bin trailer
// carrying the machine-readable details attached to the absl::Status with the functions below
// (ErrorInfo's reason, RetryInfo's delay), so that clients can tell "queue full, retry in 2 s"
// from "text too long, do not retry" without parsing messages.
#pragma once

#include <string>

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tnmt::server {

// The domain of tnmt's ErrorInfo reasons.
inline constexpr char kErrorDomain[] = "tnmt.dev";

// `s` with a google.rpc.ErrorInfo{reason, domain "tnmt.dev"} attached (reason: a stable
// UPPER_SNAKE_CASE word such as "QUEUE_FULL"). OK statuses are returned unchanged.
absl::Status WithReason(absl::Status s, const std::string& reason);
// `s` with a google.rpc.RetryInfo{retry_delay} attached (rounded up to whole milliseconds).
absl::Status WithRetryDelay(absl::Status s, absl::Duration delay);

// `s` with a google.rpc.BadRequest naming `field` (described by the message), for an
// INVALID_ARGUMENT whose message does not start with the field it concerns.
absl::Status WithFieldViolation(absl::Status s, const std::string& field);

// The reason attached by WithReason, or "" if none.
std::string ReasonOf(const absl::Status& s);

// The field an INVALID_ARGUMENT message names first, "FIELD: problem" with FIELD a path such as
// texts[3], options.beam_size or target_prefixes[0]; "" when the message does not start so.
std::string FieldOf(absl::string_view message);

// absl::Status -> grpc::Status: the same code and message; the attached details, if any, as a
// serialized google.rpc.Status in the status' error details (sent as grpc-status-details-bin),
// with a google.rpc.BadRequest field violation for an INVALID_ARGUMENT naming its field.
grpc::Status ToGrpcStatus(const absl::Status& s);

// gRPC codes over HTTP (the web API): the HTTP status of a code (OK 200; INVALID_ARGUMENT,
// FAILED_PRECONDITION, OUT_OF_RANGE 400; NOT_FOUND 404; RESOURCE_EXHAUSTED 429; UNAVAILABLE
// 503; DEADLINE_EXCEEDED 504; ...; UNKNOWN, INTERNAL, DATA_LOSS 500), the code an HTTP error
// of the transport itself stands for (400 INVALID_ARGUMENT, 413 and 429 RESOURCE_EXHAUSTED,
// ...; others UNKNOWN), and a code's name ("RESOURCE_EXHAUSTED"; an unknown one "CODE_N").
int HttpStatusFor(grpc::StatusCode code);
grpc::StatusCode GrpcCodeForHttpStatus(int http_status);
std::string CodeName(grpc::StatusCode code);

}  // namespace tnmt::server
