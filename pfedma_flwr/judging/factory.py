"""Build the judges of a run from its ``evaluation`` config section (registries, lazy models)."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from pfedma_flwr.agents.backends.configured import make_configured_backend
from pfedma_flwr.agents.backends.embedded import CACHE_ENV, EMBEDDED_MODELS
from pfedma_flwr.config import BackendConfig, EvaluationConfig
from pfedma_flwr.judging.model import JudgeCache, JudgeModel
from pfedma_flwr.judging.privacylens import (
    HelpfulnessJudge,
    LeakJudge,
    LLMLeakJudge,
    StringLeakJudge,
)
from pfedma_flwr.registry import Registry

LEAK_JUDGES: Registry[type] = Registry("leak judge")
LEAK_JUDGES.add("llm", LLMLeakJudge)
LEAK_JUDGES.add("string", StringLeakJudge)
METHOD_CHOICES = ("auto", "logprob", "generate")


def default_cache_dir() -> Path:
    """``$PFEDMA_CACHE/judgements`` or ``~/.cache/pfedma/judgements``."""
    root = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "pfedma")
    return Path(root) / "judgements"


def judge_identity(b: BackendConfig) -> str:
    """What identifies a judge model: backend, model and (embedded) the weights' sha256.

    Decoding is always greedy, so sampling settings are not part of it; the context size is
    (a prompt that does not fit is a different outcome).
    """
    if b.name == "embedded" and b.model in EMBEDDED_MODELS:
        return f"embedded:{b.model}:{EMBEDDED_MODELS[b.model].sha256 or 'unversioned'}:{b.n_ctx}"
    if b.name == "openai":
        return f"openai:{b.base_url.rstrip('/')}:{b.model}"
    return f"{b.name}:{b.model}:{b.n_ctx}"


@functools.cache
def _model(b_key: tuple[tuple[str, Any], ...], cache_dir: str) -> JudgeModel:
    b = BackendConfig(**dict(b_key))
    return JudgeModel(backend=make_configured_backend(b), identity=judge_identity(b),
                      cache=JudgeCache(cache_dir or default_cache_dir()))


def make_judge_model(b: BackendConfig, *, cache_dir: str = "") -> JudgeModel:
    """The judge model of a backend section, loaded once per process (cached on disk)."""
    key = tuple((k, v) for k, v in vars(b).items() if k != "options")
    if b.options:
        raise ValueError("a judge backend takes no plug-in options; name a registered backend")
    return _model(key, cache_dir)


def resolve_method(ev: EvaluationConfig, model: JudgeModel) -> str:
    """``evaluation.method`` with ``auto`` resolved for this model."""
    if ev.method not in METHOD_CHOICES:
        raise ValueError(f"evaluation.method must be one of {METHOD_CHOICES}, got {ev.method!r}")
    if ev.method == "auto":
        return "logprob" if model.has_logprobs else "generate"
    return ev.method


def make_leak_judge(ev: EvaluationConfig) -> LeakJudge:
    """The PrivacyLens leak judge of ``evaluation.leak_judge`` (string: no model is loaded)."""
    factory = LEAK_JUDGES.get(ev.leak_judge)
    if factory is StringLeakJudge:
        return StringLeakJudge()
    model = make_judge_model(ev.judge_backend, cache_dir=ev.cache_dir)
    return factory(model=model, method=resolve_method(ev, model),  # type: ignore[no-any-return]
                   threshold=ev.leak_threshold, max_tokens=ev.judge_backend.max_tokens,
                   prompt=ev.leak_prompt, calibrate=ev.leak_calibrate)


def make_helpfulness_judge(ev: EvaluationConfig) -> HelpfulnessJudge | None:
    """PrivacyLens's helpfulness judge; ``None`` when the run judges without a model."""
    if ev.leak_judge == "string":
        return None
    model = make_judge_model(ev.judge_backend, cache_dir=ev.cache_dir)
    return HelpfulnessJudge(model=model, method=resolve_method(ev, model),
                            max_tokens=ev.judge_backend.max_tokens)
