"""Keep API keys out of options: an option names the environment variable, never holds the key.

Options are written to disk (config.yaml, logs), so a key pasted where an env var *name* belongs,
or put in a server URL (``https://user:KEY@host/v1``, ``...?api_key=KEY``), would be saved. These
checks refuse both. Their messages never repeat the value: it may be the key.

Convention: an env var name is ``[A-Za-z_][A-Za-z0-9_]*`` and does not start like a token
(``sk-`` cannot match the pattern; ``hf_``, ``sk_``, ``ghp_`` could, so they are refused). This
catches a pasted key; it cannot prove that a well-formed name is not one.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

_ENV_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKEN_PREFIXES = ("hf_", "sk_", "ghp_", "gho_", "github_pat_")


def check_api_key_env(name: object, field: str) -> None:
    """ValueError unless ``name`` looks like an environment variable name (see the module docstring)."""
    if not isinstance(name, str) or not _ENV_VAR_NAME.fullmatch(name) or name.startswith(_TOKEN_PREFIXES):
        raise ValueError(
            f"{field} must be the name of an environment variable (letters, digits, '_'), e.g. "
            "OPENAI_API_KEY; the value given is not one (not shown: it may be a key). Put the key in "
            f"the environment (export OPENAI_API_KEY=...) and set {field}=OPENAI_API_KEY"
        )


def check_base_url(url: object, field: str) -> None:
    """ValueError unless ``url`` is an http(s) URL without credentials, query or fragment."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValueError(f"{field} must start with http:// or https://, got {url!r}; "
                         "e.g. 'http://127.0.0.1:8000/v1' for a local vLLM server")
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        raise ValueError(
            f"{field} must be a plain base URL (scheme, host, port, path); this one has user info, a query "
            "or a fragment (not shown: it may hold a key). Give the key through the environment "
            "variable named by the api_key_env option, and drop it from the URL"
        )
