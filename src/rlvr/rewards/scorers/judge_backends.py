"""Where the judge's replies come from: an OpenAI-compatible HTTP server, or a local causal LM.

Both implement ``complete(prompts) -> list[str | None]`` (None: that request failed) and
``pop_stats()``, and never raise on a failed request (except ``OpenAIChatBackend`` built with
``give_up_after``, for callers that would rather stop than go on without the server).
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import requests

from rlvr.rewards.api_keys import check_api_key_env, check_base_url, check_key_destination, may_send_key
from rlvr.rewards.bounded_http import MAX_REPLY_BYTES, EndpointDown, ReplyTooLarge, post_json, short_cause
from rlvr.rewards.scorers.base import Counters

logger = logging.getLogger(__name__)

_RETRY_STATUS = frozenset({429}) | frozenset(range(500, 600))
_HTTP_STATS = ("retries", "timeouts", "connection_errors", "http_errors", "bad_replies")


def _positive(name: str, value, *, integer: bool = False, least: float = 0.0, strict: bool = True) -> None:
    ok = (not isinstance(value, bool) and isinstance(value, int if integer else (int, float))
          and math.isfinite(value) and (value > least if strict else value >= least))
    if not ok:
        kind = "an int" if integer else "a number"
        raise ValueError(f"{name} must be {kind} {'>' if strict else '>='} {least}, got {value!r}")


class _Health:
    """Failed requests in a row (transport failures only), the last cause, and the warn-once flag."""

    def __init__(self):
        self.in_a_row = 0
        self.last_cause = ""
        self.warned = False
        self._lock = threading.Lock()

    def __getstate__(self):  # a lock cannot be pickled or deep-copied; a fresh one is equivalent
        return {key: value for key, value in vars(self).items() if key != "_lock"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def succeeded(self) -> None:
        with self._lock:
            self.in_a_row = 0

    def failed(self, cause: str, *, endpoint_down: bool) -> bool:
        """Count a failure; True the first time (the caller warns then, once)."""
        with self._lock:
            self.in_a_row = self.in_a_row + 1 if endpoint_down else 0
            self.last_cause = cause
            first, self.warned = not self.warned, True
        return first


class OpenAIChatBackend:
    """POST ``{base_url}/chat/completions`` (OpenAI, vLLM, SGLang, llama.cpp servers), greedy.

    The API key is read from the environment variable named by ``api_key_env`` at each request
    and sent as ``Authorization: Bearer ...``; it is never stored on the object, logged or
    counted, so ``repr``, pickles and stats cannot leak it. An unset variable sends no header
    (local servers need none). A key pasted as ``api_key_env`` or put in ``base_url`` is refused
    (rlvr.rewards.api_keys), since those are written to disk; so is a set key with a plain
    ``http://`` URL to a non-loopback host, unless ``allow_plain_http`` (api_keys explains).

    Each attempt is bounded in all (rlvr.rewards.bounded_http): ``timeout_s`` covers connect,
    send and the whole reply, and a reply over ``max_reply_bytes`` is dropped unread (a bad
    reply). Retries: timeouts, connection errors, HTTP 429 and 5xx are retried up to
    ``max_retries`` times, sleeping ``backoff_s · 2^attempt`` between tries; any other 4xx, a
    reply that is not the expected JSON, and a 200 without text fail at once. So a prompt takes
    at most (max_retries + 1)·timeout_s + the backoff sleeps.

    Failures are counted (stats) and logged once: the first failed request gives one warning
    naming the host, the cause and ``on_failure`` (what the caller does instead); later ones
    are logged at debug level. With ``give_up_after`` = K, once K requests in a row have failed
    for good (timeouts, connection errors, 429/5xx after their retries), requests still queued
    fail at once and ``complete`` raises ``EndpointDown``; None (the judge) never raises.

    Args:
        base_url: e.g. ``https://api.openai.com/v1`` or ``http://127.0.0.1:8000/v1``.
        model: the model name the server expects.
        api_key_env: name of the environment variable holding the key.
        timeout_s, max_retries, backoff_s, max_reply_bytes: as above.
        max_tokens: reply budget ("Score: 10" needs a few tokens).
        max_workers: requests of one batch in flight at once.
        allow_plain_http: send a set key over plain http to a non-loopback host.
        give_up_after, on_failure: as above.

    Stats: ``retries``, ``timeouts``, ``connection_errors``, ``http_errors`` (non-200 replies),
    ``bad_replies`` (a 200 without usable text, or over the size cap).
    """

    def __init__(self, base_url: str, model: str, *, api_key_env: str = "OPENAI_API_KEY",
                 timeout_s: float = 30.0, max_retries: int = 2, backoff_s: float = 0.5,
                 max_tokens: int = 16, max_workers: int = 8, max_reply_bytes: int = MAX_REPLY_BYTES,
                 allow_plain_http: bool = False, give_up_after: int | None = None,
                 on_failure: str = "scores fall back to s = r"):
        check_base_url(base_url, "base_url")
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty string, got {model!r}")
        check_api_key_env(api_key_env, "api_key_env")
        _positive("timeout_s", timeout_s)
        _positive("max_retries", max_retries, integer=True, strict=False)
        _positive("backoff_s", backoff_s, strict=False)
        _positive("max_tokens", max_tokens, integer=True)
        _positive("max_workers", max_workers, integer=True)
        _positive("max_reply_bytes", max_reply_bytes, integer=True)
        if give_up_after is not None:
            _positive("give_up_after", give_up_after, integer=True)
        check_key_destination(base_url, api_key_env, allow_plain_http=bool(allow_plain_http))
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.host = urlsplit(self.url).netloc
        self.model = model
        self.api_key_env = api_key_env
        self.timeout_s = float(timeout_s)
        self.max_retries = max_retries
        self.backoff_s = float(backoff_s)
        self.max_tokens = max_tokens
        self.max_workers = max_workers
        self.max_reply_bytes = max_reply_bytes
        self.allow_plain_http = bool(allow_plain_http)
        self.give_up_after = give_up_after
        self.on_failure = on_failure
        self._key_allowed = may_send_key(base_url, allow_plain_http=self.allow_plain_http)
        self._health = _Health()
        self._counters = Counters(*_HTTP_STATS)

    def __repr__(self) -> str:
        return (f"OpenAIChatBackend(url={self.url!r}, model={self.model!r}, "
                f"api_key_env={self.api_key_env!r}, timeout_s={self.timeout_s}, "
                f"max_retries={self.max_retries})")

    def complete(self, prompts: list[str]) -> list[str | None]:
        if len(prompts) <= 1:
            replies = [self._request(p) for p in prompts]
        else:
            with ThreadPoolExecutor(max_workers=min(self.max_workers, len(prompts))) as pool:
                replies = list(pool.map(self._request, prompts))
        if self._given_up():
            raise EndpointDown(f"{self._health.in_a_row} requests in a row to {self.url} failed "
                               f"(last: {self._health.last_cause})")
        return replies

    def _given_up(self) -> bool:
        return self.give_up_after is not None and self._health.in_a_row >= self.give_up_after

    def _request(self, prompt: str) -> str | None:
        body = {"model": self.model, "messages": [{"role": "user", "content": prompt}],
                "temperature": 0, "max_tokens": self.max_tokens}
        for attempt in range(self.max_retries + 1):
            if self._given_up():
                return None
            if attempt:
                self._counters.add("retries")
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            text, cause, retry = self._attempt(body)
            if text is not None:
                self._health.succeeded()
                return text
            if not retry:
                self._failed(cause, endpoint_down=False)
                return None
        self._failed(f"{cause}, {self.max_retries + 1} attempts", endpoint_down=True)
        return None

    def _attempt(self, body: dict) -> tuple[str | None, str, bool]:
        """One bounded POST: (reply text or None, the cause of a failure, whether a retry may help)."""
        try:
            reply = post_json(self.url, body, headers=self._headers(), timeout_s=self.timeout_s,
                              max_bytes=self.max_reply_bytes)
        except requests.Timeout:
            self._counters.add("timeouts")
            return None, f"no full reply within {self.timeout_s:g} s", True
        except requests.ConnectionError as error:
            self._counters.add("connection_errors")
            return None, f"connection failed: {short_cause(error)}", True
        except ReplyTooLarge:
            self._counters.add("bad_replies")
            return None, f"a reply over {self.max_reply_bytes} bytes, dropped unread", False
        # An invalid URL, a proxy refusing, ...: retrying cannot help.
        except Exception as error:  # noqa: BLE001
            return None, type(error).__name__, False
        if reply.status != 200:
            self._counters.add("http_errors")
            hint = f" (is ${self.api_key_env} set?)" if reply.status in (401, 403) else ""
            return None, f"HTTP {reply.status}{hint}", reply.status in _RETRY_STATUS
        text = self._reply_text(reply.body)
        return text, "a 200 reply without chat-completion text", False

    def _failed(self, cause: str, *, endpoint_down: bool) -> None:
        if self._health.failed(cause, endpoint_down=endpoint_down):
            logger.warning("a request to %s failed (%s); %s. Logged once: later failures of this endpoint are only "
                           "counted (stats: timeouts, connection_errors, http_errors, bad_replies)",
                           self.host, cause, self.on_failure)
        else:
            logger.debug("request to %s failed: %s", self.host, cause)

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key and self._key_allowed:  # set after start-up on a refused transport: not sent
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _reply_text(self, body: bytes) -> str | None:
        try:
            text = json.loads(body)["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            text = None
        if not isinstance(text, str):
            self._counters.add("bad_replies")
            return None
        return text

    def pop_stats(self) -> dict[str, float]:
        """``retries``, ``timeouts``, ``connection_errors``, ``http_errors``, ``bad_replies``."""
        stats = self._counters.pop()
        return {key: stats[key] for key in _HTTP_STATS}


class LocalModelBackend:
    """Greedy replies from an already-loaded transformers causal LM (the trainer loads it).

    Each prompt is wrapped in the tokenizer's chat template as one user message (used as is
    when the tokenizer has none), tokenized, cut from the left to fit the model's
    ``max_position_embeddings`` less ``max_new_tokens`` (the reply instruction is at the end),
    left-padded and generated in batches of ``batch_size`` with ``do_sample=False``. The model
    is put in eval mode while generating and returned to its previous mode.

    Stats: ``generation_errors`` (batches whose generation raised; their replies are None).
    """

    def __init__(self, model, tokenizer, *, max_new_tokens: int = 16, batch_size: int = 8):
        _positive("max_new_tokens", max_new_tokens, integer=True)
        _positive("batch_size", batch_size, integer=True)
        if not callable(getattr(model, "generate", None)):
            raise TypeError("model must be a transformers causal LM with generate(), "
                            f"got {type(model).__name__}")
        if getattr(tokenizer, "pad_token_id", None) is None:
            raise ValueError("the judge tokenizer has no pad token; "
                             "set tokenizer.pad_token = tokenizer.eos_token")
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size
        context = getattr(getattr(model, "config", None), "max_position_embeddings", None)
        self.max_prompt_tokens = context - max_new_tokens if isinstance(context, int) else None
        self._counters = Counters("generation_errors")

    def __repr__(self) -> str:
        return (f"LocalModelBackend(model={type(self.model).__name__}, max_new_tokens={self.max_new_tokens}, "
                f"batch_size={self.batch_size})")

    def complete(self, prompts: list[str]) -> list[str | None]:
        replies: list[str | None] = []
        for start in range(0, len(prompts), self.batch_size):
            batch = prompts[start:start + self.batch_size]
            try:
                replies.extend(self._generate(batch))
            # OOM, a template error: this batch fails, training goes on.
            except Exception as error:  # noqa: BLE001
                logger.warning("local judge failed on a batch of %d: %s", len(batch), type(error).__name__)
                self._counters.add("generation_errors")
                replies.extend([None] * len(batch))
        return replies

    def _encode(self, prompt: str) -> list[int]:
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                                      add_generation_prompt=True)
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            ids = self.tokenizer(prompt)["input_ids"]
        return ids[-self.max_prompt_tokens:] if self.max_prompt_tokens else ids

    def _generate(self, prompts: list[str]) -> list[str]:
        import torch
        from transformers import GenerationConfig

        encoded = [self._encode(p) for p in prompts]
        width = max(len(ids) for ids in encoded)
        pad = self.tokenizer.pad_token_id
        device = next(self.model.parameters()).device
        input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in encoded],
                                 device=device)  # [B, L]
        attention_mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in encoded],
                                      device=device)  # [B, L]
        # A fresh config: the model's own may carry sampling settings (temperature, top_p).
        config = GenerationConfig(do_sample=False, max_new_tokens=self.max_new_tokens, pad_token_id=pad,
                                  eos_token_id=self.model.generation_config.eos_token_id)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                output = self.model.generate(input_ids=input_ids, attention_mask=attention_mask,
                                             generation_config=config)  # [B, L + new]
        finally:
            self.model.train(was_training)
        return self.tokenizer.batch_decode(output[:, width:], skip_special_tokens=True)

    def pop_stats(self) -> dict[str, float]:
        """``generation_errors``, reset after."""
        return {"generation_errors": self._counters.pop()["generation_errors"]}
