// Status propagation helpers used across tnmt (library code never exits or aborts).
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TNMT_CONCAT_INNER(a, b) a##b
#define TNMT_CONCAT(a, b) TNMT_CONCAT_INNER(a, b)

// Returns from the current function if `expr` (an absl::Status) is not OK.
#define TNMT_RETURN_IF_ERROR(expr)            \
  do {                                        \
    ::absl::Status tnmt_status_ = (expr);     \
    if (!tnmt_status_.ok()) return tnmt_status_; \
  } while (0)

// `TNMT_ASSIGN_OR_RETURN(auto x, F());` assigns the value of a StatusOr or returns its error.
#define TNMT_ASSIGN_OR_RETURN(lhs, expr) \
  TNMT_ASSIGN_OR_RETURN_IMPL(TNMT_CONCAT(tnmt_statusor_, __LINE__), lhs, expr)
#define TNMT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
