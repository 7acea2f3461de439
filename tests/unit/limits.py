"""Settings for tests of the rules as they stand without the limiter rules: the token
bucket, and agents' reports of a 429 trusted as the gateway's (as a pool recorded before
those rules). The window limiter and agents' claims have tests of their own
(test_rate_window.py, test_rate_scopes.py)."""
from __future__ import annotations

TRUSTED_BUCKET = {"limiter": "token-bucket", "agent_retry_after_cap_seconds": None}
