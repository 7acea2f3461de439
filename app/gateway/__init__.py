"""The OpenAI- and Anthropic-compatible gateway: /v1/chat/completions, /v1/messages, /v1/models."""
