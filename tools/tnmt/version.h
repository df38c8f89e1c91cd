// The tnmt release version: the one constant `tnmt --version` prints and `tnmt serve` reports
// (ServerOptions.version: the tnmt_build_info metric's version label).
#pragma once

namespace tnmt {

inline constexpr char kVersion[] = "0.1.0";

}  // namespace tnmt
