"""Batched decoding of one chunk of prompts in one llama.cpp context (low-level API).

:class:`~pfedma_flwr.agents.backends.llama_cpp_backend.LlamaCppBackend` owns the model, the
prompt formatting and the context (sized by ``_ensure_context``: one KV stream per sequence);
this module drives that context for one chunk of prompts. Every prompt is prefilled in its own
``seq_id`` (a prefix shared by all prompts is computed once and copied), then each step decodes
one token of every still-active sequence in a single ``llama_decode`` and samples each sequence
from its own logits row with its own sampler (see ``llama_sampling``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

# shortest common prompt prefix worth prefilling once and copying to the other sequences
_MIN_SHARED = 16
# seconds between "generating" log lines of one batched call: a client's batch of the main
# job decodes for minutes, and this is the only sign of life the run log gets meanwhile
_PROGRESS_EVERY = 20.0


def common_prefix(seqs: list[list[int]]) -> int:
    """Length of the token prefix shared by all sequences, leaving >= 1 own token each.

    Parameters
    ----------
    seqs : list of list of int
        Token ids of each prompt (at least one prompt).

    Returns
    -------
    int
        Number of leading tokens equal in every prompt, at most the shortest length minus one.
    """
    n = min(len(s) for s in seqs) - 1
    first = seqs[0]
    for k in range(n):
        if any(s[k] != first[k] for s in seqs[1:]):
            return k
    return max(n, 0)


@dataclass
class Seq:
    """Decoding state of one prompt in a batch.

    Attributes
    ----------
    index : int
        Position of the prompt in its chunk; also its llama.cpp ``seq_id``.
    prompt : list of int
        Prompt token ids.
    budget : int
        Most completion tokens.
    sampler : Any
        A ``llama_sampling`` sampler (``sample``, ``fallbacks``, ``close``).
    out : list of int
        Completion token ids so far (end-of-generation token excluded).
    text : bytearray
        Detokenized completion so far, cut at a stop string when one appears.
    finish : str
        ``""`` while active, then ``"stop"``, ``"stop_string"`` or ``"length"``.
    """

    index: int
    prompt: list[int]
    budget: int
    sampler: Any
    out: list[int] = field(default_factory=list)
    text: bytearray = field(default_factory=bytearray)
    finish: str = ""


class BatchDecoder:
    """Prefill and token-by-token decoding of several sequences in one llama.cpp context.

    Parameters
    ----------
    ll : Any
        The ``llama_cpp`` module.
    ctx : Any
        The ``llama_cpp._internals.LlamaContext`` to decode in (KV cache already cleared).
    batch : Any
        The ``llama_cpp._internals.LlamaBatch`` of ``n_batch`` tokens to fill.
    vocab : Any
        The model's ``llama_vocab`` pointer (end-of-generation checks).
    model : Any
        The ``llama_cpp._internals.LlamaModel`` (token pieces for stop strings).
    n_batch : int
        Most tokens per ``llama_decode`` during prefill.
    timing : dict of str to float
        Cumulative ``prefill_s``, ``decode_s``, ``prefill_tokens`` and ``decode_tokens``;
        updated in place, so the backend's ``timings()`` sees every chunk.
    """

    def __init__(
        self,
        ll: Any,
        ctx: Any,
        batch: Any,
        vocab: Any,
        model: Any,
        n_batch: int,
        timing: dict[str, float],
    ) -> None:
        self._ll = ll
        self._ctx = ctx
        self._batch = batch
        self._vocab = vocab
        self._model = model
        self.n_batch = n_batch
        self._timing = timing

    def _decode(self) -> None:
        rc = self._ll.llama_decode(self._ctx.ctx, self._batch.batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def _accept(self, s: Seq, idx: int, stops: list[bytes]) -> None:
        tok = s.sampler.sample(self._ctx.ctx, idx)
        if self._ll.llama_vocab_is_eog(self._vocab, tok):
            s.finish = "stop"
            return
        s.out.append(tok)
        s.text += self._model.token_to_piece(tok, special=False)
        for stop in stops:
            cut = s.text.find(stop)
            if cut >= 0:
                del s.text[cut:]
                s.finish = "stop_string"
                return
        if len(s.out) >= s.budget:
            s.finish = "length"

    def prefill(self, seq_id: int, tokens: list[int], p0: int, p1: int, *, want_last: bool) -> int:
        """Decode ``tokens[p0:p1]`` into ``seq_id``; return the batch row of the last logits.

        Parameters
        ----------
        seq_id : int
            Sequence (KV stream) the tokens go to.
        tokens : list of int
            The whole prompt; positions are indices into it.
        p0, p1 : int
            Half-open range of ``tokens`` to decode, in chunks of ``n_batch``.
        want_last : bool
            Request logits for the token at ``p1 - 1``.

        Returns
        -------
        int
            Row of those logits in the last decoded batch, or -1 without ``want_last``.

        Raises
        ------
        RuntimeError
            When ``llama_decode`` fails.
        """
        b = self._batch.batch
        row = -1
        for start in range(p0, p1, self.n_batch):
            chunk = tokens[start : min(p1, start + self.n_batch)]
            b.n_tokens = len(chunk)
            for j, t in enumerate(chunk):
                b.token[j] = t
                b.pos[j] = start + j
                b.n_seq_id[j] = 1
                b.seq_id[j][0] = seq_id
                b.logits[j] = False
            if want_last and start + len(chunk) == p1:
                b.logits[len(chunk) - 1] = True
                row = len(chunk) - 1
            self._decode()
        return row

    def decode_all(self, seqs: list[Seq], stops: list[bytes]) -> None:
        """Prefill every sequence, then decode them together until each one finishes.

        Parameters
        ----------
        seqs : list of Seq
            The chunk's prompts; their ``out``, ``text`` and ``finish`` are filled in.
        stops : list of bytes
            Stop strings: the text is cut before the first one that appears.

        Raises
        ------
        RuntimeError
            When ``llama_decode`` fails (the context's KV state is then unusable).
        """
        t0 = time.perf_counter()
        b = self._batch.batch
        # Prefill each prompt on its own (chunks of n_batch): mixing sequences in one ubatch
        # was ~4x slower in llama.cpp 0.3.36 on CPU. A prefix shared by all prompts (system
        # prompt + few-shot examples) is computed once and copied to the other sequences.
        shared = common_prefix([s.prompt for s in seqs]) if len(seqs) > 1 else 0
        if shared >= _MIN_SHARED:
            self.prefill(seqs[0].index, seqs[0].prompt, 0, shared, want_last=False)
            for s in seqs[1:]:
                self._ll.llama_memory_seq_cp(self._ctx.memory, seqs[0].index, s.index, -1, -1)
        else:
            shared = 0
        for s in seqs:
            idx = self.prefill(s.index, s.prompt, shared, len(s.prompt), want_last=True)
            self._accept(s, idx, stops)
        t1 = time.perf_counter()
        self._timing["prefill_s"] += t1 - t0
        self._timing["prefill_tokens"] += shared + sum(len(s.prompt) - shared for s in seqs)
        # Decode: one token per active sequence per llama_decode.
        active = [s for s in seqs if not s.finish]
        steps = 0
        started = time.monotonic()
        note = started + _PROGRESS_EVERY
        while active:
            if time.monotonic() >= note:
                note = time.monotonic() + _PROGRESS_EVERY
                logger.info(
                    "generating %d answers: %d done, %d tokens after %.0f s",
                    len(seqs),
                    len(seqs) - len(active),
                    sum(len(s.out) for s in seqs),
                    note - _PROGRESS_EVERY - started,
                )
            b.n_tokens = len(active)
            for j, s in enumerate(active):
                b.token[j] = s.out[-1]
                b.pos[j] = len(s.prompt) + len(s.out) - 1
                b.n_seq_id[j] = 1
                b.seq_id[j][0] = s.index
                b.logits[j] = True
            self._decode()
            for j, s in enumerate(active):
                self._accept(s, j, stops)
            steps += len(active)
            active = [s for s in active if not s.finish]
        self._timing["decode_s"] += time.perf_counter() - t1
        self._timing["decode_tokens"] += steps
