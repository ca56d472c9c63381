"""Deterministic scripted backend for tests: no model, exact and countable outputs."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from pfedma_flwr.agents.backends.base import Backend, GenerationResult, Messages

Responder = Callable[[Messages], str]
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def default_responder(messages: Messages) -> str:
    """Valid agent JSON whose answer is the last number of the last user message ("0" if none).

    Deterministic, so tests can derive expected answers by hand: for "Tom has 5 apples and
    buys 7 more" the answer is "7".
    """
    user = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    numbers = _NUMBER.findall(user)
    answer = numbers[-1] if numbers else "0"
    return json.dumps(
        {
            "claims": [{"claim": f"The answer is {answer}.", "evidence": [user[:80]]}],
            "final_answer": answer,
            "domain_fit": 0.5,
            "self_confidence": 0.5,
        }
    )


class MockBackend(Backend):
    """Scripted backend.

    Parameters
    ----------
    responder : callable or mapping, optional
        ``messages -> text``, or a table from the last user message's content to text (a miss
        falls back to ``default``). ``None`` uses :func:`default_responder`.
    default : str, optional
        Text for table misses; ``None`` makes a miss an item error.

    Attributes
    ----------
    prompts : list
        Every prompt received, in order (for assertions).
    """

    name = "mock"

    def __init__(
        self,
        responder: Responder | Mapping[str, str] | None = None,
        *,
        default: str | None = None,
    ) -> None:
        super().__init__()
        self._table: Mapping[str, str] | None = None
        if responder is None:
            self._responder: Responder = default_responder
        elif isinstance(responder, Mapping):
            self._table = responder
            self._responder = self._lookup
        elif callable(responder):
            self._responder = responder
        else:
            raise ValueError(f"responder must be callable, a mapping or None, got {responder!r}")
        self._default = default
        self.prompts: list[Messages] = []

    def _lookup(self, messages: Messages) -> str:
        assert self._table is not None
        user = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        if user in self._table:
            return self._table[user]
        if self._default is None:
            raise KeyError(f"no scripted response for {user[:60]!r}")
        return self._default

    def _generate_batch(
        self,
        prompts: list[Messages],
        *,
        max_tokens: int,
        temperature: float,
        json_schema: dict[str, Any] | None,
        seed: int | None,
    ) -> list[GenerationResult]:
        out = []
        for p in prompts:
            self.prompts.append(p)
            try:
                text = self._responder(p)
            except (KeyError, ValueError) as e:
                out.append(GenerationResult.failure(f"mock: {e}"))
                continue
            # whitespace "tokens": deterministic usage numbers without a tokenizer
            words = text.split()
            finish = "length" if len(words) > max_tokens else "stop"
            text = " ".join(words[:max_tokens]) if finish == "length" else text
            n_prompt = sum(len(m["content"].split()) for m in p)
            out.append(GenerationResult(text, n_prompt, min(len(words), max_tokens), finish))
        return out
