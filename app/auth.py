"""Who is calling: the operator, or one agent. Agent tokens are stored only as hashes.

Why a plain SHA-256 and not a password hash (bcrypt, argon2): an agent token is 32 random
bytes (256 bits) that we generate, never a password a person chose, so there is no
dictionary to try and a brute force of 2^256 is out of reach however fast the hash is; a
slow hash would only make every request slower. The hash is also what the read model is
indexed by, so finding the agent costs one lookup, and that lookup is the comparison of an
agent token: the secret itself is never compared, only its hash, so what the timing of the
lookup could leak is a prefix of the SHA-256 of the caller's own guess, which tells nothing
about any real token. The operator token, kept in the clear, is compared with
hmac.compare_digest, in constant time."""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from .errors import Forbidden, Unauthenticated


@dataclass(frozen=True)
class Principal:
    kind: str                  # "operator" | "agent"
    agent_id: str | None = None
    # The gateway acting for the agent on a call it holds: only it may heartbeat, complete or
    # cancel such a turn (an agent completing its own gateway turn would hide the call's spend).
    via_gateway: bool = False

    @property
    def is_operator(self) -> bool:
        return self.kind == "operator"

    @property
    def actor(self) -> str:
        return "operator" if self.is_operator else f"agent:{self.agent_id}"


OPERATOR = Principal("operator")


AGENT_TOKEN_PREFIX = "agt_"
_AGENT_TOKEN = re.compile(r"agt_[A-Za-z0-9_-]{43}")   # the prefix and 32 bytes, url-safe base64


def new_agent_token() -> str:
    return AGENT_TOKEN_PREFIX + secrets.token_urlsafe(32)


def could_be_agent_token(token: str | None) -> bool:
    """Whether `token` has the shape new_agent_token gives. Only such a token, unknown to
    this worker, is worth a look at the log for an agent registered on another worker a
    moment ago: anything else is refused without one, so that an invalid credential
    costs the service no database read."""
    return token is not None and _AGENT_TOKEN.fullmatch(token) is not None


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def parse_bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def authenticate(token: str | None, operator_token: str, token_index: dict[str, str]) -> Principal | None:
    if not token:
        return None
    if hmac.compare_digest(token.encode(), operator_token.encode()):
        return OPERATOR
    agent_id = token_index.get(hash_token(token))
    return Principal("agent", agent_id) if agent_id else None


def require(principal: Principal | None) -> Principal:
    if principal is None:
        raise Unauthenticated("a valid bearer token is required")
    return principal


def require_operator(principal: Principal | None) -> Principal:
    principal = require(principal)
    if not principal.is_operator:
        raise Forbidden("this operation is for the operator only")
    return principal


def require_self_or_operator(principal: Principal | None, agent_id: str) -> Principal:
    principal = require(principal)
    if not principal.is_operator and principal.agent_id != agent_id:
        raise Forbidden("agents may act only on their own resources")
    return principal
