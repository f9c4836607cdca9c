"""Exceptions raised by Reducer calls, one class per status code.

Every error reducerd or the client library reports raises a subclass of
ReducerError named after its canonical code (DeadlineExceeded, Aborted,
FailedPrecondition, InvalidArgument, ...), carrying the library's message,
which names the job, the collective, the ranks and the values involved.
ReducerError is a RuntimeError, as torch.distributed's own errors are.
"""


class ReducerError(RuntimeError):
    """A failed Reducer call. `code` is the status code's name."""

    code = "UNKNOWN"
    __module__ = "reducer"

    def __init__(self, message):
        super().__init__(message)
        self.message = message


# Canonical status codes (absl / gRPC numbering) and their class names.
_CODES = [
    (1, "CANCELLED", "Cancelled"),
    (2, "UNKNOWN", "Unknown"),
    (3, "INVALID_ARGUMENT", "InvalidArgument"),
    (4, "DEADLINE_EXCEEDED", "DeadlineExceeded"),
    (5, "NOT_FOUND", "NotFound"),
    (6, "ALREADY_EXISTS", "AlreadyExists"),
    (7, "PERMISSION_DENIED", "PermissionDenied"),
    (8, "RESOURCE_EXHAUSTED", "ResourceExhausted"),
    (9, "FAILED_PRECONDITION", "FailedPrecondition"),
    (10, "ABORTED", "Aborted"),
    (11, "OUT_OF_RANGE", "OutOfRange"),
    (12, "UNIMPLEMENTED", "Unimplemented"),
    (13, "INTERNAL", "Internal"),
    (14, "UNAVAILABLE", "Unavailable"),
    (15, "DATA_LOSS", "DataLoss"),
    (16, "UNAUTHENTICATED", "Unauthenticated"),
]

_BY_NUMBER = {}
for _number, _code, _name in _CODES:
    _cls = type(_name, (ReducerError,),
                {"code": _code, "__doc__": f"Status code {_code}.", "__module__": "reducer"})
    globals()[_name] = _cls
    _BY_NUMBER[_number] = _cls

ERROR_CLASSES = tuple(_BY_NUMBER.values())


def error_for_code(number):
    """The ReducerError subclass for a numeric status code (Unknown if none)."""
    return _BY_NUMBER.get(number, _BY_NUMBER[2])
