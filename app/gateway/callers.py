"""Who is calling a gateway route that is not a turn (models, token counts): the principal
of the request's API key, in either SDK's header."""
from __future__ import annotations

from app.auth import Principal, authenticate, could_be_agent_token

from .wire import ANTHROPIC, OPENAI


async def principal_of(rt, headers) -> Principal | None:
    """The caller's principal, or None for a missing or unknown key (or no runtime yet). An
    unknown key of an agent token's shape is looked up again after catching up with the log:
    the agent may have been registered a moment ago on another worker."""
    token = OPENAI.api_key(headers) or ANTHROPIC.api_key(headers)
    if rt is None or not token:
        return None
    principal = authenticate(token, rt.operator_token, rt.projector.model.token_index)
    if principal is None and could_be_agent_token(token):
        await rt.projector.catch_up()
        principal = authenticate(token, rt.operator_token, rt.projector.model.token_index)
    return principal
