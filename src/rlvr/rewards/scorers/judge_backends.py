"""Where the judge's replies come from: an OpenAI-compatible HTTP server, or a local causal LM.

Both implement ``complete(prompts) -> list[str | None]`` (None: that request failed) and
``pop_stats()``, and never raise on a failed request.
"""

from __future__ import annotations

import logging
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor

import requests

from rlvr.rewards.api_keys import check_api_key_env, check_base_url
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


class OpenAIChatBackend:
    """POST ``{base_url}/chat/completions`` (OpenAI, vLLM, SGLang, llama.cpp servers), greedy.

    The API key is read from the environment variable named by ``api_key_env`` at each request
    and sent as ``Authorization: Bearer ...``; it is never stored on the object, logged or
    counted, so ``repr``, pickles and stats cannot leak it. An unset variable sends no header
    (local servers need none). A key pasted as ``api_key_env`` or put in ``base_url`` is refused
    (rlvr.rewards.api_keys), since those are written to disk.

    Retries: timeouts, connection errors, HTTP 429 and 5xx are retried up to ``max_retries``
    times, sleeping ``backoff_s · 2^attempt`` between tries; any other 4xx, a reply that is not
    the expected JSON, and a 200 without text fail at once. ``timeout_s`` bounds the connect and
    each read (requests' semantics), not the whole transfer.

    Args:
        base_url: e.g. ``https://api.openai.com/v1`` or ``http://127.0.0.1:8000/v1``.
        model: the model name the server expects.
        api_key_env: name of the environment variable holding the key.
        timeout_s, max_retries, backoff_s: as above.
        max_tokens: reply budget ("Score: 10" needs a few tokens).
        max_workers: requests of one batch in flight at once.

    Stats: ``retries``, ``timeouts``, ``connection_errors``, ``http_errors`` (non-200 replies),
    ``bad_replies`` (200 without usable text).
    """

    def __init__(self, base_url: str, model: str, *, api_key_env: str = "OPENAI_API_KEY",
                 timeout_s: float = 30.0, max_retries: int = 2, backoff_s: float = 0.5,
                 max_tokens: int = 16, max_workers: int = 8):
        check_base_url(base_url, "base_url")
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty string, got {model!r}")
        check_api_key_env(api_key_env, "api_key_env")
        _positive("timeout_s", timeout_s)
        _positive("max_retries", max_retries, integer=True, strict=False)
        _positive("backoff_s", backoff_s, strict=False)
        _positive("max_tokens", max_tokens, integer=True)
        _positive("max_workers", max_workers, integer=True)
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key_env = api_key_env
        self.timeout_s = float(timeout_s)
        self.max_retries = max_retries
        self.backoff_s = float(backoff_s)
        self.max_tokens = max_tokens
        self.max_workers = max_workers
        self._counters = Counters(*_HTTP_STATS)

    def __repr__(self) -> str:
        return (f"OpenAIChatBackend(url={self.url!r}, model={self.model!r}, "
                f"api_key_env={self.api_key_env!r}, timeout_s={self.timeout_s}, "
                f"max_retries={self.max_retries})")

    def complete(self, prompts: list[str]) -> list[str | None]:
        if len(prompts) <= 1:
            return [self._request(p) for p in prompts]
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(prompts))) as pool:
            return list(pool.map(self._request, prompts))

    def _request(self, prompt: str) -> str | None:
        body = {"model": self.model, "messages": [{"role": "user", "content": prompt}],
                "temperature": 0, "max_tokens": self.max_tokens}
        for attempt in range(self.max_retries + 1):
            if attempt:
                self._counters.add("retries")
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                response = requests.post(self.url, json=body, headers=self._headers(), timeout=self.timeout_s)
            except requests.Timeout:
                self._counters.add("timeouts")
                continue
            except requests.ConnectionError:
                self._counters.add("connection_errors")
                continue
            # An invalid URL, a proxy refusing, ...: retrying cannot help.
            except Exception as error:  # noqa: BLE001
                logger.warning("judge request to %s failed: %s", self.url, type(error).__name__)
                return None
            if response.status_code == 200:
                return self._reply_text(response)
            self._counters.add("http_errors")
            if response.status_code not in _RETRY_STATUS:
                hint = f"; is ${self.api_key_env} set?" if response.status_code in (401, 403) else ""
                logger.warning("judge request to %s: HTTP %d, not retried%s",
                               self.url, response.status_code, hint)
                return None
        logger.warning("judge request to %s failed after %d attempts", self.url, self.max_retries + 1)
        return None

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _reply_text(self, response: requests.Response) -> str | None:
        try:
            text = response.json()["choices"][0]["message"]["content"]
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
