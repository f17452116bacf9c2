"""Identities: stored API keys, end-user tokens, groups (issue 28)."""
