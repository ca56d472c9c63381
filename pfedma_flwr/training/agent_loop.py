"""veRL agent loop ``pfedma_orchestrator``: the multi-round routing episode as one trajectory.

Per training row, :func:`~pfedma_flwr.training.episode.run_episode` drives the collaboration
engine in a worker thread; each routing decision of the engine's
:class:`~pfedma_flwr.routing.llm_orchestrator.LLMOrchestrator` becomes one policy turn here:
the new user message (the next round's state: ``z``, candidates' ``C``/``S``, asks) is merged
into the token stream with ``response_mask`` 0, the policy's tokens come from
``server_manager.generate`` with mask 1, and their decoded text goes back to the parser. After
the episode (STOP, ``T_max`` or the response budget) the trajectory summary is written to
``extra_fields`` for :func:`pfedma_flwr.training.reward.compute_score`.

:class:`OrchestratorAgentLoop` exists only when veRL is importable (``pip install -e
'.[train]'``); this module itself imports without it. Register it with
``conf/training/agent_loops.yaml`` (``actor_rollout_ref.rollout.agent.agent_loop_config_path``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

from pfedma_flwr.agents.backends.base import Messages
from pfedma_flwr.anomaly.judges import EmbeddingJudge
from pfedma_flwr.embeddings import Embedder, get_embedder
from pfedma_flwr.routing.llm_orchestrator import LLMOrchestrator
from pfedma_flwr.server.query_state import EngineSettings
from pfedma_flwr.training.data import AGENT_NAME
from pfedma_flwr.training.episode import (
    PolicyBackend,
    ReplayCache,
    run_episode,
    task_from_extra_info,
)

logger = logging.getLogger(__name__)

try:  # veRL is the optional `train` extra
    from verl.experimental.agent_loop.agent_loop import (
        AgentLoopBase,
        AgentLoopMetrics,
        AgentLoopOutput,
        register,
    )
except ImportError:  # pragma: no cover - exercised where veRL is absent
    HAVE_VERL = False
else:
    HAVE_VERL = True

#: the reply that ends an episode whose response budget is spent (no token is generated)
BUDGET_STOP = "<stop/>"


@functools.cache
def load_cache(path: str) -> ReplayCache:
    """The replay cache of ``path``, read once per process (agent loops are built per row)."""
    return ReplayCache.from_jsonl(path)


@functools.cache
def cached_judge(embedding: str, model_path: str) -> EmbeddingJudge:
    """One calibrated embedding judge per process and embedder."""
    return EmbeddingJudge(embedder=get_embedder(embedding, model_path))


@dataclass
class Rollout:
    """The token stream of one trajectory as it grows turn by turn."""

    request_id: str = field(default_factory=lambda: uuid4().hex)
    prompt_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    messages: Messages = field(default_factory=list)
    turns: int = 0
    truncated: bool = False


if HAVE_VERL:

    @register(AGENT_NAME)
    class OrchestratorAgentLoop(AgentLoopBase):  # type: ignore[misc]
        """PFedMA routing episodes as veRL trajectories (see the module docstring).

        Parameters
        ----------
        replay_path : str
            Replay cache (``.jsonl``/``.jsonl.gz``) of client answers and the client pool.
        t_max, k_max : int
            Collaboration rounds per query and clients per round (``strategy.t_max/k_max``).
        embedding, embedding_model_path : str
            Embedder of the engine, judge and heuristic fallback (``embedding.name``).
        stop_support, exploration_c : float
            Heuristic fallback settings (``routing.*``).
        *args, **kwargs
            What veRL passes to every agent loop (config, server manager, tokenizer, ...).
        """

        def __init__(
            self, *args: Any, replay_path: str, t_max: int = 2, k_max: int = 3,
            embedding: str = "minilm", embedding_model_path: str = "",
            stop_support: float = 0.7, exploration_c: float = 0.1, **kwargs: Any,
        ) -> None:
            kwargs.pop("name", None)  # the registration entry's own name key
            super().__init__(*args, **kwargs)
            self.response_length = int(self.rollout_config.response_length)
            self.cache = load_cache(str(replay_path))
            self.settings = EngineSettings(t_max=int(t_max), k_max=int(k_max))
            self.embedder: Embedder = get_embedder(embedding, embedding_model_path)
            self.judge = cached_judge(embedding, embedding_model_path)
            self.stop_support = float(stop_support)
            self.exploration_c = float(exploration_c)

        async def _turn(self, ro: Rollout, messages: Messages,
                        sampling_params: dict[str, Any]) -> str:
            """One policy turn: merge the new user message (mask 0), generate (mask 1)."""
            if ro.truncated or len(ro.response_mask) >= self.response_length:
                ro.truncated = True
                return BUDGET_STOP
            if not ro.messages:
                ro.prompt_ids = await self.ct_build_initial_tokens(messages)
            else:
                if messages[:len(ro.messages)] != ro.messages:
                    raise RuntimeError("orchestrator conversation diverged from the rollout's")
                merged, ro.response_mask, logprobs = await self.ct_merge_context_msg(
                    ro.messages, messages, ro.prompt_ids, ro.response_mask,
                    ro.response_logprobs or None)
                ro.prompt_ids = merged.token_ids
                ro.response_logprobs = list(logprobs or [])
                if len(ro.response_mask) >= self.response_length:
                    ro.truncated = True
                    return BUDGET_STOP
            out = await self.server_manager.generate(
                request_id=ro.request_id, prompt_ids=ro.prompt_ids,
                sampling_params=sampling_params)
            merged, ro.response_mask, logprobs = await self.ct_merge_assistant_token(
                ro.prompt_ids, list(out.token_ids), ro.response_mask,
                ro.response_logprobs if out.log_probs else None,
                assistant_logprobs=out.log_probs or None)
            ro.prompt_ids = merged.token_ids
            ro.response_logprobs = list(logprobs or [])
            ro.turns += 1
            text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
            ro.messages = [*messages, {"role": "assistant", "content": text}]
            return str(text)

        async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
            """Run one episode for the row in ``kwargs`` (``raw_prompt``, ``extra_info``, ...)."""
            question = next(m["content"] for m in reversed(list(kwargs["raw_prompt"]))
                            if m["role"] == "user")
            task = task_from_extra_info(dict(kwargs["extra_info"]), question,
                                        str(kwargs["reward_model"]["ground_truth"]))
            ro = Rollout()
            loop = asyncio.get_running_loop()

            def policy(messages: Messages) -> str:
                # runs in the episode thread; the turn itself runs on the event loop
                return asyncio.run_coroutine_threadsafe(
                    self._turn(ro, messages, sampling_params), loop).result()

            orch = LLMOrchestrator(backend=PolicyBackend(policy), k_max=self.settings.k_max,
                                   embedder=self.embedder, stop_support=self.stop_support,
                                   exploration_c=self.exploration_c)
            # a thread of its own: the default executor also serves the ct_* tokenization
            # the turns wait for, and blocked episodes must not be able to exhaust it
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pfedma-episode") as ex:
                summary = await loop.run_in_executor(ex, functools.partial(
                    run_episode, task, cache=self.cache, orchestrator=orch,
                    settings=self.settings, embedder=self.embedder, judge=self.judge))
            n_resp = len(ro.response_mask)
            response_ids = ro.prompt_ids[len(ro.prompt_ids) - n_resp:] if n_resp else []
            prompt_ids = ro.prompt_ids[:len(ro.prompt_ids) - n_resp]
            extra = {**summary.to_extra_fields(), "truncated": ro.truncated,
                     "turn_scores": [], "tool_rewards": []}
            return AgentLoopOutput(
                prompt_ids=prompt_ids,
                response_ids=response_ids[:self.response_length],
                response_mask=ro.response_mask[:self.response_length],
                response_logprobs=(ro.response_logprobs[:self.response_length]
                                   if ro.response_logprobs else None),
                num_turns=2 * ro.turns, metrics=AgentLoopMetrics(), extra_fields=extra,
            )
