"""Errors the service raises; the API maps `code` to GraphQL `extensions.code`."""


class ServiceError(Exception):
    code = "INTERNAL"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class BadInput(ServiceError):
    code = "BAD_USER_INPUT"


class NotFound(ServiceError):
    code = "NOT_FOUND"


class Conflict(ServiceError):
    code = "CONFLICT"


class Forbidden(ServiceError):
    code = "FORBIDDEN"


class Unauthenticated(ServiceError):
    code = "UNAUTHENTICATED"


class Unavailable(ServiceError):
    code = "UNAVAILABLE"


class LimitExceeded(ServiceError):
    """A per-agent or per-request cap (retry later, or ask for less)."""
    code = "LIMIT_EXCEEDED"


class Deadlock(ServiceError):
    """A resource request refused because waiting would close a cycle of agents."""
    code = "DEADLOCK"
