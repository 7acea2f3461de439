"""POST /v1/responses: OpenAI's Responses API, native where the upstream serves it, else
carried over the upstream's chat completions.

One call is one turn either way. The first call to an upstream sends the request as it is;
a 404 (or 405) that is not about the model means the upstream lacks the path: that answer
is no model call, so the same turn goes on with the request translated to chat completions
(app/gateway/responses.py) and completes once, with the chat answer's usage. The upstream
is remembered as lacking the path (Upstreams.lacks, for an hour), so later calls go
straight to the translation, and a request it cannot carry is refused with a 400 before
any turn is taken.
"""
from __future__ import annotations

import json
import time
import uuid
from typing import cast

from app.api.holder import RuntimeHolder
from app.domain import events as ev

from .output_estimate import OutputEstimator
from .proxy import GatewayEndpoint, UpstreamCall, _Exchange
from .responses import ChatToResponses, Untranslatable, chat_request
from .responses_wire import RESPONSES
from .turns import GatewayTurn
from .upstreams import Upstreams
from .wire import OPENAI


class ResponsesEndpoint(GatewayEndpoint):
    def __init__(self, holder: RuntimeHolder, estimator: OutputEstimator | None = None):
        super().__init__(holder, RESPONSES, estimator)

    def _upstreams(self) -> Upstreams:
        return cast(Upstreams, self.holder.upstreams)   # set before the runtime

    def check(self, upstream, body: dict) -> None:
        if self._upstreams().lacks(upstream.base_url, RESPONSES.path):
            chat_request(body)   # raises Untranslatable, a 400, before the turn

    async def _forward(self, x: _Exchange, turn: GatewayTurn, upstream, raw: bytes, body: dict, pool: str,
                       prompt: int, encoding: str, streaming: bool, call: UpstreamCall | None = None) -> bool:
        upstreams = self._upstreams()
        if not upstreams.lacks(upstream.base_url, RESPONSES.path):
            native = UpstreamCall(RESPONSES.path, raw, RESPONSES, absent_ok=True)
            if await super()._forward(x, turn, upstream, raw, body, pool, prompt, encoding, streaming, native):
                return True
            upstreams.note_absent(upstream.base_url, RESPONSES.path)
        try:
            chat = chat_request(body)
        except Untranslatable as exc:
            # Found out only now, on the first call to this upstream: no model was called.
            await turn.complete(ev.ERROR, 0, 0)
            await x.error(400, str(exc))
            return True
        translation = ChatToResponses(body, "resp_" + uuid.uuid4().hex, int(time.time()))
        translated = UpstreamCall(OPENAI.path, json.dumps(chat).encode(), OPENAI, translation)
        return await super()._forward(x, turn, upstream, raw, body, pool, prompt, encoding, streaming, translated)
