"""Threat-model row: `upstreamBaseUrl` accepted `file://`, loopback and link-local addresses
(`http://169.254.169.254/...`, a cloud's metadata service), and the gateway POSTed there and
relayed the answer. A pool's upstream is public https, or a host the operator allows."""
from __future__ import annotations

import uuid

import pytest

from tests.client import GraphQLClient, GraphQLError
from tests.conftest import OPERATOR_TOKEN

REFUSED = ["file:///etc/passwd", "http://169.254.169.254/latest/meta-data", "https://169.254.169.254/v1",
           "http://localhost:8000/v1", "https://localhost/v1", "http://10.0.0.7/v1", "https://192.168.1.20/v1",
           "https://[::1]/v1", "https://[::ffff:127.0.0.1]/v1", "https://2130706433/v1", "https://0x7f000001/v1",
           "http://api.openai.com/v1", "https://user:pw@api.openai.com/v1", "gopher://api.openai.com/", "https:///v1"]


@pytest.mark.parametrize("url", REFUSED)
async def test_a_pool_cannot_name_an_internal_or_plain_http_upstream(server, url):
    name = "ssrf_" + uuid.uuid4().hex[:8]
    async with GraphQLClient(server, OPERATOR_TOKEN) as op:
        with pytest.raises(GraphQLError) as refused:
            await op("mutation($i: PoolInput!) { createPool(input: $i) { name } }",
                     i={"name": name, "lanes": 1, "rpm": 60, "tpm": 1000, "upstreamBaseUrl": url})
    assert refused.value.code == "BAD_USER_INPUT"
    assert name not in server.runtime.projector.model.pools     # nothing was written


async def test_public_https_and_allowed_hosts_are_accepted(server):
    async with GraphQLClient(server, OPERATOR_TOKEN) as op:
        for url in ("https://api.openai.com/v1", "http://127.0.0.1:9/v1"):   # the tests allow 127.0.0.1
            name = "ok_" + uuid.uuid4().hex[:8]
            await op("mutation($i: PoolInput!) { createPool(input: $i) { name } }",
                     i={"name": name, "lanes": 1, "rpm": 60, "tpm": 1000, "upstreamBaseUrl": url})
            assert name in server.runtime.projector.model.pools
