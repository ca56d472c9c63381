"""The llama.cpp backend's model file, chat template and high-level (sequential) completion.

Setup and the reference mode of :class:`~pfedma_flwr.agents.backends.llama_cpp_backend.
LlamaCppBackend`: which GGUF file a model name means, the chat formatter built from the
template in its metadata (exactly as ``Llama.create_chat_completion`` formats, so batched and
sequential modes see identical tokens), and one ``create_chat_completion`` call.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from pfedma_flwr.agents.backends.base import GenerationResult, Messages
from pfedma_flwr.agents.backends.embedded import EMBEDDED_MODELS, embedded_model_path

logger = logging.getLogger(__name__)


def resolve_model(model: str) -> Path:
    """The GGUF file of an embedded model name or a path; ``ValueError`` naming both kinds."""
    if model in EMBEDDED_MODELS:
        return embedded_model_path(model)
    path = Path(model).expanduser()
    if not path.is_file():
        raise ValueError(
            f"model {model!r} is neither an embedded model {sorted(EMBEDDED_MODELS)} "
            "nor an existing .gguf file"
        )
    return path


def chat_formatter(ll: Any, llm: Any, model_name: str) -> Any:
    """The chat formatter of ``llm``'s GGUF template (ChatML for a model without one)."""
    fmt = ll.llama_chat_format
    template = llm.metadata.get("tokenizer.chat_template")
    if template is None:
        # Base models (e.g. gemma-3-270m) carry no template; ChatML is a neutral fallback.
        logger.warning("%s has no chat template; using ChatML", model_name)
        return fmt.format_chatml
    eos, bos = llm.token_eos(), llm.token_bos()
    return fmt.Jinja2ChatFormatter(
        template=template,
        eos_token=llm._model.token_get_text(eos) if eos != -1 else "",
        bos_token=llm._model.token_get_text(bos) if bos != -1 else "",
        stop_token_ids=[eos],
    )


def sequential_completion(
    llm: Any, messages: Messages, *, max_tokens: int, temperature: float,
    json_schema: dict[str, Any] | None, seed: int,
) -> GenerationResult:
    """One high-level ``create_chat_completion`` (the sequential mode, a reference)."""
    kwargs: dict[str, Any] = {}
    if json_schema is not None:
        kwargs["response_format"] = {"type": "json_object", "schema": json_schema}
    try:
        r = llm.create_chat_completion(
            messages=messages,
            max_tokens=max_tokens,
            temperature=temperature,
            # plain temperature sampling, same chain as batched mode
            top_k=0,
            top_p=1.0,
            min_p=0.0,
            seed=seed,
            **kwargs,
        )
    except (ValueError, RuntimeError) as e:  # prompt too long, decode failure
        return GenerationResult.failure(f"llama.cpp: {e}")
    choice = r["choices"][0]
    usage = r["usage"]
    return GenerationResult(
        text=choice["message"]["content"] or "",
        prompt_tokens=usage["prompt_tokens"],
        completion_tokens=usage["completion_tokens"],
        finish_reason=choice["finish_reason"] or "stop",
    )
