"""The LLM backend interface: one batched ``generate`` call, per-item errors, usage counters.

Every model an agent, judge or orchestrator talks to sits behind :class:`Backend` (DESIGN §2:
"LLMs live behind a backend interface with batch generation"). A backend never raises for one
bad item of a batch: that item comes back as a :class:`GenerationResult` with ``error`` set, so
one failed prompt cannot sink the replies to every other routed query. Each failure carries a
short ``code`` (``connect``, ``timeout``, ``http_404``, ...) that the client reports upward,
and :meth:`Backend.health_check` lets the handshake fail fast on a backend that cannot answer.
"""

from __future__ import annotations

import abc
import logging
import threading
from collections.abc import Mapping, Sequence
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
    code : str
        Empty on success; otherwise a short reason code (``[a-z0-9_]``, e.g. ``connect``,
        ``timeout``, ``http_500``, ``bad_prompt``) to count failures by.
    cached : bool
        Served from the node's generation cache (:mod:`~pfedma_flwr.agents.backends.cache`):
        the token counts are those of the generation that produced it.
    """

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"
    error: str = ""
    code: str = ""
    cached: bool = False

    @property
    def tokens(self) -> int:
        """Total tokens, prompt plus completion."""
        return self.prompt_tokens + self.completion_tokens

    @property
    def ok(self) -> bool:
        """Whether the item produced text without an error."""
        return not self.error

    @classmethod
    def failure(cls, error: str, prompt_tokens: int = 0, *, code: str = "error"
                ) -> GenerationResult:
        """A failed item carrying its reason and reason code."""
        return cls(text="", prompt_tokens=prompt_tokens, finish_reason="error", error=error,
                   code=code or "error")


class BackendUnavailableError(RuntimeError):
    """A backend cannot serve generations (endpoint down, model missing, key refused).

    Raised by :meth:`Backend.health_check`; the message names the backend, endpoint and model.
    """


class ModelNotFoundError(BackendUnavailableError, ValueError):
    """A backend's model is not where its config says (no such directory, not in the cache)."""


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
    #: whether the generation cache is on when the config leaves it unset (``cache: null``)
    cache_default: bool = False

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
        seeds: Sequence[int] | None = None,
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
        seeds : sequence of int, optional
            One sampling seed per item, in place of ``seed + k`` (the generation cache asks
            for the items it misses with the seeds they have in the whole batch).

        Returns
        -------
        list of GenerationResult
            Same length and order as ``prompts``; failures have ``error`` set.
        """
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        if not temperature >= 0.0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(f"seeds has {len(seeds)} entries for {len(prompts)} prompts")
        results: list[GenerationResult | None] = []
        valid: list[int] = []
        for k, p in enumerate(prompts):
            reason = validate_messages(p)
            results.append(GenerationResult.failure(reason, code="bad_prompt") if reason
                           else None)
            if not reason:
                valid.append(k)
        if valid:
            produced = self._generate_batch(
                [list(prompts[k]) for k in valid],
                max_tokens=max_tokens,
                temperature=temperature,
                json_schema=json_schema,
                seed=seed,
            ) if seeds is None else self._generate_seeded(
                [list(prompts[k]) for k in valid], seeds=[int(seeds[k]) for k in valid],
                max_tokens=max_tokens, temperature=temperature, json_schema=json_schema)
            if len(produced) != len(valid):
                raise RuntimeError(
                    f"{type(self).__name__} returned {len(produced)} results "
                    f"for {len(valid)} prompts"
                )
            for k, r in zip(valid, produced, strict=True):
                results[k] = r
        out = [r if r is not None else GenerationResult.failure("missing", code="missing")
               for r in results]
        self._tally_call(out)
        return out

    def _tally_call(self, out: Sequence[GenerationResult]) -> None:
        """Add one call's items to the counters; log its failures in one line."""
        with self._lock:
            self.calls += 1
            self.items += len(out)
            self.prompt_tokens += sum(r.prompt_tokens for r in out)
            self.completion_tokens += sum(r.completion_tokens for r in out)
            self.errors += sum(1 for r in out if r.error)
        failed = [r for r in out if r.error]
        if failed:
            # One line per batch: a dead endpoint must be visible, not 20 identical lines.
            codes: dict[str, int] = {}
            for r in failed:
                codes[r.code or "error"] = codes.get(r.code or "error", 0) + 1
            logger.warning("%s: %d of %d items failed %s; first: %s", self.name, len(failed),
                           len(out), dict(sorted(codes.items())), failed[0].error[:300])

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

    def next_token_logprobs(
        self, prompts: Sequence[Messages], prefixes: Sequence[str],
        labels: Mapping[str, Sequence[str]],
    ) -> list[dict[str, float]]:
        """Log-probability of each label as the next token after ``prefix`` in the reply.

        For frozen judges (``pfedma_flwr.judging``): ``labels`` maps a label to its surface
        forms (``{"Yes": [" Yes", "Yes"], "No": [" No", "No"]}``); the assistant turn of each
        prompt starts with its ``prefix`` (e.g. ``"Answer:"``). Backends that cannot read
        logits raise ``NotImplementedError`` (judges then generate and parse instead).
        """
        raise NotImplementedError(f"{type(self).__name__} does not expose next-token logits")

    def _generate_seeded(
        self,
        prompts: list[Messages],
        *,
        seeds: list[int],
        max_tokens: int,
        temperature: float,
        json_schema: dict[str, Any] | None,
    ) -> list[GenerationResult]:
        """Like :meth:`_generate_batch` with one seed per item.

        Backends that seed each item on its own override this with one batch; the default
        makes one :meth:`_generate_batch` call per run of consecutive seeds, so that item ``k``
        of a run starting at seed ``s`` samples with ``s + k`` as the contract says.
        """
        out: list[GenerationResult] = []
        start = 0
        for end in range(1, len(prompts) + 1):
            if end == len(prompts) or seeds[end] != seeds[end - 1] + 1:
                out.extend(self._generate_batch(
                    prompts[start:end], max_tokens=max_tokens, temperature=temperature,
                    json_schema=json_schema, seed=seeds[start]))
                start = end
        return out

    def cache_identity(self) -> dict[str, Any] | None:
        """What identifies this backend's model and decoding for the generation cache.

        ``None`` (the default) means its answers are not cached: scripted and mock backends.
        Real backends return the model's content hash (or endpoint and model id) and the
        settings that change an answer (context length, dtype, library version).
        """
        return None

    def timings(self) -> dict[str, float]:
        """Cumulative time split of this backend's generations (for the run profile).

        Empty by default; the embedded llama.cpp backend reports ``prefill_s``, ``decode_s``,
        ``prefill_tokens`` and ``decode_tokens``.
        """
        return {}

    def endpoint(self) -> str:
        """Where this backend generates, for messages (no secrets): here, in-process."""
        return f"{self.name} (in-process)"

    def health_check(self, *, timeout: float = 10.0) -> None:  # noqa: B027 - ok by default
        """Raise :class:`BackendUnavailableError` if this backend cannot generate now.

        In-process backends (embedded llama.cpp, transformers, mock) are ready once
        constructed (loading the model raises on its own), so the default does nothing;
        remote backends override it with a short request.

        Parameters
        ----------
        timeout : float
            Seconds the check may wait for a remote endpoint.
        """

    def close(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing
        """Release resources (model memory, HTTP pools)."""
