"""DaGRPO options (docs/algorithms/dagrpo.md). Every interpretation of the paper is a knob with the spec's default.

Labels: pair masking and anchors are the paper's mechanisms [paper]; every number and rule below
is our reconstruction [design] (only the paper's abstract is public).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlvr.config.fields import _f, _fail
from rlvr.rewards.api_keys import check_api_key_env, check_base_url

SCORER_NAMES = ("none", "reward", "steps", "embed", "judge")
JUDGE_BACKEND_OPTIONS = ("judge_model", "judge_base_url", "judge_model_name")


@dataclass(frozen=True)
class DaGRPOConfig:
    scorer: str = _f("none", "fine-grained scorer q: none (s = r), reward, steps (offline stand-in), embed, judge")
    score_alpha: float = _f(0.5, "s = alpha*r + (1-alpha)*q")
    pair_masking: bool = _f(False, "SGR: drop pair contrasts with |s_i - s_j| < pair_tau")
    pair_tau: float = _f(0.2, "distinctiveness threshold tau")
    pair_tau_kappa: float | None = _f(None, "adaptive threshold tau_g = kappa * std_g(s) (null: fixed pair_tau)")
    contrast: str = _f("reward", "contrast in the pairwise advantage: reward (c = r) | score (c = s)")
    anchors: str = _f("off", "expert anchors: off | failed (when correct <= anchor_max_correct) | always")
    anchor_max_correct: int = _f(0, "kappa: inject when at most this many on-policy responses are correct")
    anchor_placement: str = _f("replace_worst", "replace_worst (G fixed) | append")
    anchor_in_stats: bool = _f(True, "include the anchor in the group's std")
    anchor_psi: str = _f("log", "anchor loss psi(p): log (advantage-weighted SFT) | luffy (p/(p+gamma))")
    anchor_gamma: float = _f(0.1, "gamma of LUFFY's shaping")
    anchor_overlong: str = _f("truncate", "anchors longer than max_completion_length: truncate | skip")
    judge_model: str | None = _f(None, "judge scorer, local back end: model alias, path or Hub id (needs scorer=judge)")
    judge_base_url: str | None = _f(None, "judge scorer, OpenAI-compatible back end: base URL (e.g. http://host:8000/v1) "
                                          "(needs scorer=judge)")
    judge_model_name: str | None = _f(None, "judge scorer, OpenAI-compatible back end: model name (needs scorer=judge)")
    judge_api_key_env: str = _f("OPENAI_API_KEY", "name of the env var holding the judge's API key (the key is never saved)")
    judge_timeout: float = _f(30.0, "seconds per judge request in all (connect, send and the whole reply; each "
                                    "retry has its own); a reply over 1 MiB is dropped unread")
    judge_max_retries: int = _f(2, "judge retries on timeouts, connection errors, 429 and 5xx")
    judge_allow_plain_http: bool = _f(False, "send the judge's API key over plain http:// to a judge_base_url "
                                             "that is not loopback (refused by default: anyone on the path reads it)")

    def __post_init__(self) -> None:
        if self.scorer not in SCORER_NAMES:
            _fail("scorer", self.scorer, f"choose one of {SCORER_NAMES}")
        for name in JUDGE_BACKEND_OPTIONS:
            if self.scorer != "judge" and getattr(self, name) is not None:
                _fail(name, getattr(self, name), f"only the judge scorer reads it and scorer={self.scorer}: "
                      f"add scorer=judge, or drop {name}")
        if not 0.0 <= self.score_alpha <= 1.0:
            _fail("score_alpha", self.score_alpha, "use a weight in [0, 1]")
        if self.pair_tau < 0:
            _fail("pair_tau", self.pair_tau, "thresholds must be >= 0")
        if self.pair_tau_kappa is not None and self.pair_tau_kappa < 0:
            _fail("pair_tau_kappa", self.pair_tau_kappa, "use kappa >= 0, or null for the fixed pair_tau")
        choices = {"contrast": ("reward", "score"), "anchors": ("off", "failed", "always"),
                   "anchor_placement": ("replace_worst", "append"), "anchor_psi": ("log", "luffy"),
                   "anchor_overlong": ("truncate", "skip")}
        for name, valid in choices.items():
            if getattr(self, name) not in valid:
                _fail(name, getattr(self, name), f"choose one of {valid}")
        if self.anchor_max_correct < 0:
            _fail("anchor_max_correct", self.anchor_max_correct, "use 0 (all wrong) or more")
        if self.anchor_gamma <= 0:
            _fail("anchor_gamma", self.anchor_gamma, "use gamma > 0 (LUFFY: 0.1)")
        if self.scorer == "judge" and (self.judge_model is None) == (self.judge_base_url is None):
            _fail("judge_model/judge_base_url", (self.judge_model, self.judge_base_url),
                  "the judge scorer needs exactly one back end: judge_model=PATH_OR_ALIAS, or "
                  "judge_base_url=URL with judge_model_name=NAME")
        check_api_key_env(self.judge_api_key_env, "judge_api_key_env")  # config.yaml must never hold a key
        if self.judge_base_url is not None:
            check_base_url(self.judge_base_url, "judge_base_url")
        if self.judge_base_url is not None and not self.judge_model_name:
            _fail("judge_model_name", self.judge_model_name, "name the model served at judge_base_url")
        if self.judge_timeout <= 0 or self.judge_max_retries < 0:
            _fail("judge_timeout/judge_max_retries", (self.judge_timeout, self.judge_max_retries),
                  "use a positive timeout and retries >= 0")

    @property
    def enabled(self) -> bool:
        return self.pair_masking or self.anchors != "off" or self.scorer != "none"
