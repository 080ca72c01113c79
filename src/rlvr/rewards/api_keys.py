"""Keep API keys out of options: an option names the environment variable, never holds the key.

Options are written to disk (config.yaml, logs), so a key pasted where an env var *name* belongs,
or put in a server URL (``https://user:KEY@host/v1``, ``...?api_key=KEY``), would be saved. These
checks refuse both. Their messages never repeat the value: it may be the key.

Convention: an env var name is ``[A-Za-z_][A-Za-z0-9_]*`` and does not start like a token
(``sk-`` cannot match the pattern; ``hf_``, ``sk_``, ``ghp_`` could, so they are refused). This
catches a pasted key; it cannot prove that a well-formed name is not one.

Where a key may go (``check_key_destination``, ``may_send_key``), when its variable is set:
over https to any host; over plain http only to a loopback host (127.0.0.0/8, ::1,
``localhost``), since anyone on the network path reads a plain-http Bearer token, unless the
caller allows it explicitly (``judge_allow_plain_http=true``, ``rlvr rephrase
--allow-plain-http``). An https host that is not the key's usual provider (``KEY_HOSTS``: the
OpenAI key and api.openai.com) gets a warning, once per process for each (variable, host): a
warning, not a refusal (a proxy or gateway may be meant). An unset variable sends nothing, so
nothing is refused.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import threading
from urllib.parse import urlsplit

logger = logging.getLogger(__name__)

_ENV_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKEN_PREFIXES = ("hf_", "sk_", "ghp_", "gho_", "github_pat_")
KEY_HOSTS = {"OPENAI_API_KEY": "api.openai.com"}  # env var -> the host that key is usually for
ALLOW_PLAIN_HTTP_HINT = ("judge_allow_plain_http=true for the judge, --allow-plain-http for rlvr rephrase, "
                         "allow_plain_http=True in Python")
_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


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


def is_loopback(host: str | None) -> bool:
    """True for ``localhost``, 127.0.0.0/8 and ::1 (a host name is not resolved)."""
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def may_send_key(base_url: str, *, allow_plain_http: bool) -> bool:
    """Whether a key may go to ``base_url``: https, a loopback host, or plain http explicitly allowed."""
    parts = urlsplit(base_url)
    return parts.scheme == "https" or is_loopback(parts.hostname) or allow_plain_http


def check_key_destination(base_url: str, api_key_env: str, *, allow_plain_http: bool) -> None:
    """Refuse to send ``$api_key_env`` over plain http to a non-loopback host; warn on an odd https host.

    Only when the variable is set (module docstring). ValueError names the fixes; the key is
    never shown.
    """
    if not os.environ.get(api_key_env):
        return
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if parts.scheme == "http" and not is_loopback(host):
        if not allow_plain_http:
            raise ValueError(
                f"refusing to send the API key in ${api_key_env} over plain http:// to {host} (not a loopback "
                "host): anyone on the network path could read it. Use an https:// URL; or, if that server needs "
                f"no key, unset {api_key_env} or name an unset variable as api_key_env (--api-key-env); or, on a "
                f"network you trust, allow it explicitly ({ALLOW_PLAIN_HTTP_HINT})"
            )
        _warn_once(api_key_env, host, f"sending the API key in ${api_key_env} over plain http:// to {host}, "
                   "as allowed explicitly: anyone on the network path can read it")
        return
    usual = KEY_HOSTS.get(api_key_env)
    if parts.scheme == "https" and usual is not None and host != usual:
        _warn_once(api_key_env, host, f"${api_key_env} is set and will be sent to {host}, which is not {usual}; "
                   f"if that server should not get this key, point api_key_env (--api-key-env) at the variable "
                   "holding its own key, or at an unset one")


def _warn_once(api_key_env: str, host: str, message: str) -> None:
    with _warned_lock:
        if (api_key_env, host) in _warned:
            return
        _warned.add((api_key_env, host))
    logger.warning(message)
