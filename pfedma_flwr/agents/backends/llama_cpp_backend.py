"""Embedded llama.cpp backend with real batched decoding over several sequences of one context.

llama-cpp-python's high-level API generates for one prompt at a time. ``mode="batched"`` drives
the low-level API instead: one ``llama_context`` with ``n_seq_max`` = batch size and one KV
stream per sequence; all prompts are prefilled in shared ``llama_batch``es (one ``seq_id`` per
prompt), then every step decodes one token of each still-active sequence in a single
``llama_decode`` and samples each sequence from its own logits row with its own sampler (greedy
under a JSON-schema grammar checks the plain argmax first, see ``llama_sampling``; otherwise a
chain of grammar, then greedy or temperature + seeded dist). ``mode="sequential"`` is the
high-level ``create_chat_completion`` per prompt, kept as a reference and fallback. This module
loads the model, formats prompts and sizes the context; ``llama_batch`` decodes each chunk.

Prompts use the chat template stored in the GGUF metadata, formatted exactly as
``Llama.create_chat_completion`` does, so both modes see identical token sequences.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pfedma_flwr.agents.backends.base import Backend, GenerationResult, Messages
from pfedma_flwr.agents.backends.embedded import (
    model_sha256,
)
from pfedma_flwr.agents.backends.llama_batch import BatchDecoder, Seq
from pfedma_flwr.agents.backends.llama_chat import (
    chat_formatter,
    resolve_model,
    sequential_completion,
)
from pfedma_flwr.agents.backends.llama_sampling import ChainSampler, GrammarGreedySampler

logger = logging.getLogger(__name__)

Mode = Literal["batched", "sequential"]
MODES: tuple[str, ...] = ("batched", "sequential")
_CTX_ROUND = 256


class LlamaCppBackend(Backend):
    """Chat generation with llama-cpp-python from a GGUF file or an embedded model name.

    Parameters
    ----------
    model : str
        An embedded model name (see :data:`~pfedma_flwr.agents.backends.embedded.EMBEDDED_MODELS`)
        or a path to a ``.gguf`` file.
    n_threads : int
        CPU threads; 0 means ``os.cpu_count()``.
    n_ctx : int
        Context length available to each prompt (prompt plus completion).
    mode : {"batched", "sequential"}
        Batched low-level decoding (default) or one high-level call per prompt.
    max_batch : int
        Most prompts decoded together; longer lists are split into chunks.
    n_batch : int
        Most tokens per ``llama_decode`` during prefill.
    seed : int
        Default sampling seed when ``generate`` gets none.
    kv_unified : bool
        Share one KV buffer among the sequences. Off by default: separate streams keep greedy
        batched output token-identical to sequential output (tested), and were faster here.
    """

    name = "embedded"
    cache_default = True

    def __init__(
        self,
        *,
        model: str = "qwen2.5-coder-0.5b",
        n_threads: int = 0,
        n_ctx: int = 4096,
        mode: str = "batched",
        max_batch: int = 8,
        n_batch: int = 512,
        seed: int = 0,
        kv_unified: bool = False,
    ) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}")
        if n_threads < 0:
            raise ValueError(f"n_threads must be >= 0 (0 = all cores), got {n_threads}")
        if n_ctx < 64:
            raise ValueError(f"n_ctx must be >= 64, got {n_ctx}")
        if not 1 <= max_batch <= n_batch:
            raise ValueError(f"need 1 <= max_batch <= n_batch, got {max_batch}, {n_batch}")
        import llama_cpp  # optional dependency: imported only when this backend is built

        self._ll = llama_cpp
        self.model_path = resolve_model(model)
        self.mode: str = mode
        self.n_threads = n_threads or os.cpu_count() or 1
        self.n_ctx = n_ctx
        self.max_batch = max_batch
        self.n_batch = n_batch
        self.seed = seed
        self.kv_unified = kv_unified
        self._gen_lock = threading.Lock()
        self.llm = llama_cpp.Llama(
            model_path=str(self.model_path),
            # batched mode decodes in its own context; the Llama one only serves sequential mode
            n_ctx=n_ctx if mode == "sequential" else _CTX_ROUND,
            n_batch=n_batch,
            n_threads=self.n_threads,
            n_threads_batch=self.n_threads,
            seed=seed,
            verbose=False,
        )
        self._formatter = chat_formatter(llama_cpp, self.llm, self.model_path.name)
        self._vocab = self.llm._model.vocab
        self._n_vocab = int(llama_cpp.llama_vocab_n_tokens(self._vocab))
        # steps where the grammar rejected the plain argmax (full-vocabulary check needed)
        self.grammar_fallbacks = 0
        # cumulative seconds and tokens of prompt prefill and of token-by-token decoding
        self._timing = {"prefill_s": 0.0, "decode_s": 0.0, "prefill_tokens": 0.0,
                        "decode_tokens": 0.0}
        self._ctx: Any = None
        self._ctx_cells = 0
        self._ctx_seqs = 0
        self._batch: Any = None
        logger.info(
            "llama.cpp backend: %s, mode=%s, n_threads=%d, n_ctx=%d",
            self.model_path.name,
            mode,
            self.n_threads,
            n_ctx,
        )

    # ------------------------------------------------------------------ setup

    def format_prompt(self, messages: Messages) -> tuple[list[int], list[bytes]]:
        """Token ids of the chat prompt (template applied) and the stop strings."""
        res = self._formatter(messages=messages)
        tokens = self.llm.tokenize(
            res.prompt.encode("utf-8"), add_bos=not res.added_special, special=True
        )
        stops = res.stop if isinstance(res.stop, list) else [res.stop] if res.stop else []
        return tokens, [s.encode("utf-8") for s in stops if s]

    def next_token_logprobs(
        self, prompts: Sequence[Messages], prefixes: Sequence[str],
        labels: Mapping[str, Sequence[str]],
    ) -> list[dict[str, float]]:
        """See :meth:`Backend.next_token_logprobs` (``llama_scoring``: shared prefixes kept)."""
        from pfedma_flwr.agents.backends.llama_scoring import score_labels

        if len(prefixes) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(prefixes)} prefixes")
        toks = [self.format_prompt(list(m))[0]
                + self.llm.tokenize(p.encode("utf-8"), add_bos=False, special=False)
                for m, p in zip(prompts, prefixes, strict=True)]
        return score_labels(self, toks, labels)

    # ------------------------------------------------------------------ generate

    def _generate_batch(
        self,
        prompts: list[Messages],
        *,
        max_tokens: int,
        temperature: float,
        json_schema: dict[str, Any] | None,
        seed: int | None,
    ) -> list[GenerationResult]:
        seed = self.seed if seed is None else seed
        return self._generate_seeded(prompts, seeds=[seed + k for k in range(len(prompts))],
                                     max_tokens=max_tokens, temperature=temperature,
                                     json_schema=json_schema)

    def _generate_seeded(
        self,
        prompts: list[Messages],
        *,
        seeds: list[int],
        max_tokens: int,
        temperature: float,
        json_schema: dict[str, Any] | None,
    ) -> list[GenerationResult]:
        # each sequence has its own sampler, so any seed per item fits in one batch
        out: list[GenerationResult] = []
        with self._gen_lock:
            if self.mode == "sequential":
                for p, s in zip(prompts, seeds, strict=True):
                    out.append(sequential_completion(
                        self.llm, p, max_tokens=max_tokens, temperature=temperature,
                        json_schema=json_schema, seed=s))
                return out
            for start in range(0, len(prompts), self.max_batch):
                end = start + self.max_batch
                out.extend(self._batched(prompts[start:end], max_tokens, temperature,
                                         json_schema, seeds[start:end]))
        return out

    def cache_identity(self) -> dict[str, Any]:
        """The GGUF file's sha256, llama.cpp's version and the settings that change answers."""
        return {"backend": "llama.cpp", "llama_cpp": str(getattr(self._ll, "__version__", "")),
                "model_sha256": model_sha256(self.model_path), "n_ctx": self.n_ctx,
                "n_batch": self.n_batch, "mode": self.mode, "kv_unified": self.kv_unified}

    def _make_sampler(self, temperature: float, grammar: Any, seed: int) -> Any:
        if grammar is not None and temperature == 0.0:
            return GrammarGreedySampler(self._ll, self._vocab, grammar, self._n_vocab)
        return ChainSampler(self._ll, self.llm._model, temperature, grammar, seed)

    def _ensure_context(self, per_seq: int, n_seqs: int) -> None:
        if self._ctx is not None and self._ctx_cells >= per_seq and self._ctx_seqs >= n_seqs:
            self._ctx.kv_cache_clear()
            return
        ll = self._ll
        # Same params as the high-level context (K/V types, attention kernel) so numerics match
        # sequential mode; only sizes and the sequence count differ.
        params = type(self.llm.context_params).from_buffer_copy(self.llm.context_params)
        params.n_ctx = per_seq * n_seqs
        params.n_batch = self.n_batch
        params.n_ubatch = min(self.n_batch, params.n_ubatch or self.n_batch)
        params.n_seq_max = n_seqs
        # One KV stream per sequence: each sequence's cells start at 0 exactly as in a
        # single-sequence context, which keeps attention sums bit-identical to sequential
        # decoding. A unified cache interleaves sequences and changed greedy outputs
        # (measured with SmolLM2-135M: 2 of 3 prompts diverged after ~5 tokens).
        params.kv_unified = self.kv_unified
        if self._ctx is not None:
            self._ctx.close()
        self._ctx = ll._internals.LlamaContext(model=self.llm._model, params=params, verbose=False)
        self._ctx_cells, self._ctx_seqs = per_seq, n_seqs
        if self._batch is None:
            self._batch = ll._internals.LlamaBatch(n_tokens=self.n_batch, embd=0, n_seq_max=1)

    def _batched(
        self,
        prompts: list[Messages],
        max_tokens: int,
        temperature: float,
        json_schema: dict[str, Any] | None,
        seeds: list[int],
    ) -> list[GenerationResult]:
        results: list[GenerationResult | None] = [None] * len(prompts)
        grammar = None
        if json_schema is not None:
            grammar = self._ll.LlamaGrammar.from_json_schema(json.dumps(json_schema), verbose=False)
        seqs: list[Seq] = []
        stops: list[bytes] = []
        for k, p in enumerate(prompts):
            try:
                toks, stops = self.format_prompt(p)
            except (ValueError, RuntimeError, TypeError) as e:  # template errors, bad roles
                results[k] = GenerationResult.failure(f"prompt formatting failed: {e}")
                continue
            if len(toks) >= self.n_ctx:
                results[k] = GenerationResult.failure(
                    f"prompt of {len(toks)} tokens does not fit n_ctx={self.n_ctx}", len(toks)
                )
                continue
            budget = min(max_tokens, self.n_ctx - len(toks))
            seqs.append(Seq(k, toks, budget, self._make_sampler(temperature, grammar, seeds[k])))
        if seqs:
            per_seq = max(len(s.prompt) + s.budget for s in seqs)
            self._ensure_context(-(-per_seq // _CTX_ROUND) * _CTX_ROUND, len(prompts))
            try:
                self._decoder().decode_all(seqs, stops)
            except RuntimeError as e:
                # a failed llama_decode leaves the shared KV state unusable for the whole chunk
                for s in seqs:
                    results[s.index] = GenerationResult.failure(f"llama_decode: {e}", len(s.prompt))
                self._ctx.close()
                self._ctx = None
                return [r if r is not None else GenerationResult.failure("lost") for r in results]
        for s in seqs:
            self.grammar_fallbacks += s.sampler.fallbacks
            s.sampler.close()
            results[s.index] = GenerationResult(
                text=self.llm.detokenize(s.out).decode("utf-8", errors="replace")
                if s.finish != "stop_string"
                else bytes(s.text).decode("utf-8", errors="replace"),
                prompt_tokens=len(s.prompt),
                completion_tokens=len(s.out),
                finish_reason="length" if s.finish == "length" else "stop",
            )
        return [r if r is not None else GenerationResult.failure("lost") for r in results]

    def _decoder(self) -> BatchDecoder:
        """A decoder over the current context and batch (call after ``_ensure_context``)."""
        return BatchDecoder(self._ll, self._ctx, self._batch, self._vocab, self.llm._model,
                            self.n_batch, self._timing)

    def _prefill(self, seq_id: int, tokens: list[int], p0: int, p1: int, *, want_last: bool) -> int:
        """See :meth:`BatchDecoder.prefill` (``llama_scoring`` prefills through this)."""
        return self._decoder().prefill(seq_id, tokens, p0, p1, want_last=want_last)

    def timings(self) -> dict[str, float]:
        """Cumulative prefill/decode seconds and tokens of batched generations."""
        return dict(self._timing)

    def close(self) -> None:
        """Free the batched context and the model."""
        if self._ctx is not None:
            self._ctx.close()
            self._ctx = None
        if self._batch is not None:
            self._batch.close()
            self._batch = None
        self.llm.close()
