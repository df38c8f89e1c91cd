"""TnmtError: a failed call with the server's structured error details."""

from dataclasses import dataclass, field
from typing import Any, List, Optional, Tuple

import grpc


@dataclass
class TnmtError(Exception):
    """A call the server refused or that failed.

    code:             the gRPC status code
    message:          the server's message (it names the field or text at fault)
    reason:           google.rpc.ErrorInfo reason when the server gave one (QUEUE_FULL,
                      DEADLINE_UNREACHABLE, TOO_MANY_TEXTS, TEXT_TOO_LONG, REQUEST_TOO_COSTLY,
                      INVALID_TEXT, ...), else ""
    retry_delay:      google.rpc.RetryInfo's delay in seconds when the server said to retry
                      later, else None
    field_violations: google.rpc.BadRequest's (field, description) pairs, if any
    attempts:         calls made, retries included
    """

    code: grpc.StatusCode
    message: str
    reason: str = ""
    retry_delay: Optional[float] = None
    field_violations: List[Tuple[str, str]] = field(default_factory=list)
    attempts: int = 1

    def __str__(self) -> str:
        why = f" [{self.reason}]" if self.reason else ""
        return f"{self.code.name}{why}: {self.message}"

    @property
    def retryable(self) -> bool:
        """True for errors a later retry may fix: the server is unavailable, or it asked to retry."""
        return self.code == grpc.StatusCode.UNAVAILABLE or self.retry_delay is not None


def from_rpc_error(e: grpc.RpcError, attempts: int = 1) -> TnmtError:
    """The TnmtError of a failed call, with the details of its grpc-status-details-bin trailer."""
    from tnmt_client._proto.google.rpc import error_details_pb2, status_pb2

    code = e.code() if callable(getattr(e, "code", None)) else grpc.StatusCode.UNKNOWN
    message = e.details() if callable(getattr(e, "details", None)) else str(e)
    err = TnmtError(code=code, message=message or "", attempts=attempts)
    trailers: Any = e.trailing_metadata() if callable(getattr(e, "trailing_metadata", None)) else None
    for key, value in trailers or ():
        if key != "grpc-status-details-bin":
            continue
        status = status_pb2.Status()
        try:
            status.ParseFromString(value)
        except Exception:  # a malformed trailer leaves the plain code and message
            continue
        for any_detail in status.details:
            info = error_details_pb2.ErrorInfo()
            retry = error_details_pb2.RetryInfo()
            bad = error_details_pb2.BadRequest()
            if any_detail.Unpack(info):
                err.reason = info.reason
            elif any_detail.Unpack(retry):
                err.retry_delay = retry.retry_delay.seconds + retry.retry_delay.nanos / 1e9
            elif any_detail.Unpack(bad):
                err.field_violations.extend((v.field, v.description) for v in bad.field_violations)
    return err
