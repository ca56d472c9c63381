"""The PPO config: composes on veRL 0.9.1's ppo_trainer, uses only real keys, passes its checks.

Skipped without veRL. veRL's ``validate_config`` is what ``main_ppo`` runs before training; it
runs on CPU.
"""

from pathlib import Path

import pytest
import yaml

pytest.importorskip("verl", reason="veRL is the optional 'train' extra (pip install -e '.[train]')")

from omegaconf import OmegaConf  # noqa: E402

from pfedma_flwr.training.__main__ import main  # noqa: E402
from pfedma_flwr.training.ppo_config import compose_ppo_config  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf" / "training"


def tiny_model(path):
    """A local Qwen2-shaped model dir (config + tokenizer): what veRL's model config loads."""
    from transformers import Qwen2Config

    from tests.unit.test_training_agent_loop import build_tokenizer

    tok = build_tokenizer()
    Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=1, architectures=["Qwen2ForCausalLM"]).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def overrides(tmp_path):
    return [
        f"actor_rollout_ref.model.path={tiny_model(tmp_path / 'tiny-qwen2')}",
        f"data.train_files={tmp_path / 'train.parquet'}",
        f"data.val_files={tmp_path / 'val.parquet'}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={CONF / 'agent_loops.yaml'}",
        f"reward.custom_reward_function.path={REPO / 'pfedma_flwr/training/reward.py'}",
    ]


def composed(tmp_path):
    return compose_ppo_config(overrides(tmp_path))


def leaves(d, prefix=""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from leaves(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}"


def test_every_key_exists_in_verl_0_9_1():
    import verl

    generated = OmegaConf.load(Path(verl.__file__).parent / "trainer/config/"
                               "_generated_ppo_trainer.yaml")
    ours = yaml.safe_load((CONF / "ppo_router_r1.yaml").read_text())
    ours.pop("hydra")
    ours.pop("defaults")
    unknown = []
    for key in leaves(ours):
        parent, _, last = key.rpartition(".")
        # reward_kwargs: free-form compute_score keywords, read by get_custom_reward_fn
        if parent == "reward.custom_reward_function.reward_kwargs":
            continue
        node = OmegaConf.select(generated, parent)
        # keys() also lists mandatory "???" values, which `in` skips
        if node is None or last not in node.keys():
            unknown.append(key)
    assert unknown == []


def test_router_r1_settings_compose_and_pass_verl_validation(tmp_path):
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    cfg = composed(tmp_path)
    a, r = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    # Router-R1's values survive composition on top of veRL's defaults
    assert (cfg.algorithm.adv_estimator, cfg.algorithm.kl_ctrl.kl_coef) == ("gae", 0.001)
    assert (a.optim.lr, cfg.critic.optim.lr, a.entropy_coeff) == (1e-6, 1e-5, 0.001)
    assert (cfg.data.train_batch_size, a.ppo_mini_batch_size) == (64, 32)
    assert (r.name, r.prompt_length, r.response_length) == ("vllm", 4096, 1024)
    assert cfg.trainer.total_training_steps == 220
    assert cfg.critic.model.path == cfg.actor_rollout_ref.model.path
    # PPO: a critic, and a reference policy for the KL-in-reward
    assert need_critic(cfg) and need_reference_policy(cfg)
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg),
                    use_critic=need_critic(cfg))


def test_check_config_command(tmp_path, capsys):
    assert main(["check-config", *overrides(tmp_path)]) == 0
    assert "passes veRL's checks" in capsys.readouterr().out
    # without dynamic batching, a mini batch of 128 exceeds the batch of 64: veRL refuses it
    bad = [*overrides(tmp_path), "actor_rollout_ref.actor.use_dynamic_bsz=false",
           "actor_rollout_ref.actor.ppo_mini_batch_size=128"]
    assert main(["check-config", *bad]) == 2
    assert "ppo_mini_batch_size" in capsys.readouterr().err
    # a model path is required (the yaml leaves it ???)
    assert main(["check-config"]) == 2


def test_agent_loop_registration_file():
    entries = OmegaConf.load(CONF / "agent_loops.yaml")
    (entry,) = entries
    assert entry.name == "pfedma_orchestrator"
    assert entry._target_ == "pfedma_flwr.training.agent_loop.OrchestratorAgentLoop"
    from pfedma_flwr.training.data import AGENT_NAME

    assert entry.name == AGENT_NAME
