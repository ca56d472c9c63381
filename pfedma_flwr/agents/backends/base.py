"""The LLM backend interface: one batched ``generate`` call, per-item errors, usage counters.

Every model an agent, judge or orchestrator talks to sits behind :class:`Backend` (DESIGN §2:
"LLMs live behind a backend interface with batch generation"). A backend never raises for one
bad item of a batch: that item comes back as a :class:`GenerationResult` with ``error`` set, so
one failed prompt cannot sink the replies to every other routed query.
"""

from __future__ import annotations

import abc
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

logger = logging.getLogger(__name__)

Messages = list[dict[str, str]]
FinishReason = Literal["stop", "length", "error"]


@dataclass(frozen=True)
class GenerationResult:
    """The outcome of generating for one prompt of a batch.

    Attributes
    ----------
    text : str
        Generated text (empty on error).
    prompt_tokens, completion_tokens : int
        Token usage as counted by the backend (0 where the server reports none).
    finish_reason : str
        ``"stop"`` (EOS or stop string), ``"length"`` (hit ``max_tokens``) or ``"error"``.
    error : str
        Empty on success; otherwise why this item failed.
    """

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"
    error: str = ""

    @property
    def tokens(self) -> int:
        """Total tokens, prompt plus completion."""
        return self.prompt_tokens + self.completion_tokens

    @property
    def ok(self) -> bool:
        """Whether the item produced text without an error."""
        return not self.error

    @classmethod
    def failure(cls, error: str, prompt_tokens: int = 0) -> GenerationResult:
        """A failed item carrying its reason."""
        return cls(text="", prompt_tokens=prompt_tokens, finish_reason="error", error=error)


def validate_messages(messages: Any) -> str:
    """Return ``""`` if ``messages`` is a non-empty chat message list, else the reason it is not."""
    if not isinstance(messages, list) or not messages:
        return "prompt must be a non-empty list of chat messages"
    for k, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            return f"message {k} must be a dict with a string 'role'"
        if not isinstance(m.get("content"), str):
            return f"message {k} must have string 'content'"
    return ""


class Backend(abc.ABC):
    """A chat LLM that generates for a whole batch of prompts in one call.

    Subclasses implement :meth:`_generate_batch`; :meth:`generate` validates arguments, turns
    malformed prompts into per-item errors and keeps the usage counters (``calls``: batches
    served, ``items``: prompts served, ``prompt_tokens``/``completion_tokens``).
    """

    #: registry name, for logs
    name: str = "backend"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls = 0
        self.items = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.errors = 0

    @property
    def tokens(self) -> int:
        """Total tokens consumed so far."""
        return self.prompt_tokens + self.completion_tokens

    def usage(self) -> dict[str, int]:
        """Counters as a flat dict (for metrics)."""
        return {
            "calls": self.calls,
            "items": self.items,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "errors": self.errors,
        }

    def generate(
        self,
        prompts: Sequence[Messages],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        json_schema: dict[str, Any] | None = None,
        seed: int | None = None,
    ) -> list[GenerationResult]:
        """Generate one completion per chat prompt.

        Parameters
        ----------
        prompts : sequence of list of dict
            Chat messages (``{"role": ..., "content": ...}``) per item.
        max_tokens : int
            Generation budget per item (>= 1).
        temperature : float
            0 means greedy decoding.
        json_schema : dict, optional
            Constrain/ask for JSON following this schema, where the backend supports it.
        seed : int, optional
            Sampling seed (item ``k`` uses ``seed + k`` where the backend samples per item).

        Returns
        -------
        list of GenerationResult
            Same length and order as ``prompts``; failures have ``error`` set.
        """
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        if not temperature >= 0.0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        results: list[GenerationResult | None] = []
        valid: list[int] = []
        for k, p in enumerate(prompts):
            reason = validate_messages(p)
            results.append(GenerationResult.failure(reason) if reason else None)
            if not reason:
                valid.append(k)
        if valid:
            produced = self._generate_batch(
                [list(prompts[k]) for k in valid],
                max_tokens=max_tokens,
                temperature=temperature,
                json_schema=json_schema,
                seed=seed,
            )
            if len(produced) != len(valid):
                raise RuntimeError(
                    f"{type(self).__name__} returned {len(produced)} results "
                    f"for {len(valid)} prompts"
                )
            for k, r in zip(valid, produced, strict=True):
                results[k] = r
        out = [r if r is not None else GenerationResult.failure("missing") for r in results]
        with self._lock:
            self.calls += 1
            self.items += len(out)
            self.prompt_tokens += sum(r.prompt_tokens for r in out)
            self.completion_tokens += sum(r.completion_tokens for r in out)
            self.errors += sum(1 for r in out if r.error)
        for r in out:
            if r.error:
                logger.warning("%s: item failed: %s", self.name, r.error)
        return out

    @abc.abstractmethod
    def _generate_batch(
        self,
        prompts: list[Messages],
        *,
        max_tokens: int,
        temperature: float,
        json_schema: dict[str, Any] | None,
        seed: int | None,
    ) -> list[GenerationResult]:
        """Generate for validated prompts: one result per prompt, never raising per item."""

    def close(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing
        """Release resources (model memory, HTTP pools)."""
