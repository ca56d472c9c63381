"""SMOKE TEST, not the paper's PPO: two TRL GRPO steps on CPU with the project's reward.

A random two-layer Qwen2 (in-test BPE tokenizer, nothing downloaded) writes the round-1 routing
action; the reward runs the real episode (engine, replayed answers, heuristic fallback for
malformed actions, STOP afterwards) and scores it with ``compute_score``. It shows one RL
update runs end to end through the orchestrator's prompt, parser, engine and reward; veRL PPO
on a GPU is the real training (docs/training.md). Runs only where TRL is installed.
"""

import pytest

pytest.importorskip("trl", reason="TRL is optional (a CPU smoke test only): pip install trl")
pytest.importorskip("verl", reason="reuses the veRL tests' offline tokenizer")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import Qwen2Config, Qwen2ForCausalLM  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from pfedma_flwr.config import load_config  # noqa: E402
from pfedma_flwr.embeddings import HashingEmbedder  # noqa: E402
from pfedma_flwr.routing.llm_orchestrator import LLMOrchestrator, build_prompt  # noqa: E402
from pfedma_flwr.routing.orchestrator import CandidateState, OrchestratorQuery  # noqa: E402
from pfedma_flwr.routing.state import RoutingState  # noqa: E402
from pfedma_flwr.server.components import build_orchestrator  # noqa: E402
from pfedma_flwr.server.query_state import EngineSettings  # noqa: E402
from pfedma_flwr.training.episode import PolicyBackend, run_episode  # noqa: E402
from pfedma_flwr.training.reward import compute_score  # noqa: E402
from tests.unit.test_training_agent_loop import build_tokenizer  # noqa: E402
from tests.unit.test_training_episode import TASK, cache, clients  # noqa: E402

EMB = HashingEmbedder(dim=64)


def round_one_prompt():
    q = OrchestratorQuery(TASK.task_id, TASK.question, "math")
    cands = [CandidateState(c, RoutingState(), d.description, None, False, d.domains)
             for c, d in clients().items()]
    return build_prompt(q, None, cands, round=1, k_max=2)


@pytest.mark.slow
def test_two_grpo_steps_with_the_episode_reward(tmp_path):
    torch.manual_seed(0)
    tok = build_tokenizer()
    model = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id))
    scored = []

    def episode_reward(prompts, completions, **kwargs):
        out = []
        for completion in completions:
            text = completion[-1]["content"] if isinstance(completion, list) else completion
            replies = iter([text])
            orch = LLMOrchestrator(
                backend=PolicyBackend(lambda _m, it=replies: next(it, "<stop/>")),
                k_max=2, embedder=EMB)
            s = run_episode(TASK, cache=cache(), orchestrator=orch,
                            settings=EngineSettings(t_max=2, k_max=2), embedder=EMB)
            r = compute_score("pfedma/math", text, TASK.gold, s.to_extra_fields())["score"]
            scored.append((s.format_ok, r))
            out.append(r)
        return out

    data = Dataset.from_list([{"prompt": round_one_prompt()}] * 4)
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, max_steps=2,
                      per_device_train_batch_size=4, num_generations=2,
                      max_completion_length=16, report_to="none", logging_steps=1,
                      save_strategy="no")
    trainer = GRPOTrainer(model=model, reward_funcs=[episode_reward], args=args,
                          train_dataset=data, processing_class=tok)
    trainer.train()
    assert trainer.state.global_step == 2
    # every generated completion went through the episode and the §3.11 reward
    assert len(scored) >= 8
    # a malformed action costs R_fmt = -1; the heuristic fallback still answers (R_ans <= 1,
    # steps <= 0.2), so such rewards stay <= 0.2
    assert all(r <= 0.2 + 1e-9 for ok, r in scored if not ok)
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert logged
    # the trained policy, saved as a Hugging Face directory, is the configured `llm`
    # orchestrator again (docs/training.md "Using the trained checkpoint")
    ckpt = tmp_path / "checkpoint"
    trainer.save_model(str(ckpt))
    tok.save_pretrained(str(ckpt))
    cfg = load_config({"overrides": f"routing.orchestrator=llm strategy.k_max=2 "
                                    f"routing.llm_backend.name=transformers "
                                    f"routing.llm_backend.model={ckpt} "
                                    f"routing.llm_backend.max_tokens=16"})
    orch = build_orchestrator(cfg, EMB)
    assert isinstance(orch, LLMOrchestrator)
    q = OrchestratorQuery(TASK.task_id, TASK.question, "math")
    cands = [CandidateState(c, RoutingState(), d.description, None, False, d.domains)
             for c, d in clients().items()]
    sel = orch.select(q, None, cands, round=1)
    # the checkpoint generated the reply (a 2-step random policy rarely parses: then the
    # heuristic routes, and the failure is counted)
    st = orch.state()
    assert st["decisions"] == 1 and st["tokens"] > 0
    assert sel.clients and set(sel.clients) <= set(clients())
    assert sel.reason == "llm" or st["format_failures"] == 1
