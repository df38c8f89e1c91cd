// absl time <-> google.protobuf.Timestamp / Duration, for the API's times.
#pragma once

#include <cmath>
#include <cstdint>

#include <google/protobuf/duration.pb.h>
#include <google/protobuf/timestamp.pb.h>

#include "absl/time/time.h"

namespace tnmt::server {

// `t` as a Timestamp (nanosecond precision); absl::InfinitePast() leaves it unset (cleared).
inline void SetTimestamp(absl::Time t, google::protobuf::Timestamp* out) {
  out->Clear();
  const int64_t ns = absl::ToUnixNanos(t);
  out->set_seconds(ns >= 0 ? ns / 1000000000 : -((-ns + 999999999) / 1000000000));
  out->set_nanos(static_cast<int32_t>(ns - out->seconds() * 1000000000));
}

inline absl::Time FromTimestamp(const google::protobuf::Timestamp& t) {
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

// `seconds` (finite, >= 0) as a Duration.
inline void SetDuration(double seconds, google::protobuf::Duration* out) {
  const double whole = std::floor(seconds);
  out->set_seconds(static_cast<int64_t>(whole));
  out->set_nanos(static_cast<int32_t>(std::llround((seconds - whole) * 1e9) % 1000000000));
}

inline double Seconds(const google::protobuf::Duration& d) { return d.seconds() + d.nanos() * 1e-9; }

}  // namespace tnmt::server
