"""Compose the PPO config exactly as ``main_ppo`` would and run veRL's own checks (CPU).

``scripts/train_orchestrator.sh --check`` calls :func:`check_ppo_config` with the overrides it
would launch with, so a typo or an inconsistent batch size fails in seconds on a laptop
instead of after the GPU job started. Needs veRL (the ``train`` extra).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pfedma_flwr.resources import conf_dir

# conf/training in a checkout, pfedma_flwr/_conf/training in a wheel
CONFIG_DIR = conf_dir() / "training"
CONFIG_NAME = "ppo_router_r1"


def compose_ppo_config(overrides: Sequence[str], config_dir: str | Path = CONFIG_DIR) -> Any:
    """The composed Hydra config of ``<config_dir>/ppo_router_r1.yaml`` plus ``overrides``."""
    try:
        from hydra import compose, initialize_config_dir
    except ImportError as e:
        raise RuntimeError("composing the PPO config needs veRL's hydra-core: "
                           "pip install -e '.[train]'") from e
    cdir = Path(config_dir)
    if not (cdir / f"{CONFIG_NAME}.yaml").is_file():
        raise FileNotFoundError(f"{cdir / (CONFIG_NAME + '.yaml')} does not exist")
    with initialize_config_dir(config_dir=str(cdir.resolve()), version_base=None):
        return compose(config_name=CONFIG_NAME, overrides=list(overrides))


def check_ppo_config(overrides: Sequence[str], config_dir: str | Path = CONFIG_DIR) -> Any:
    """Compose and validate with ``verl.utils.config.validate_config``; return the config."""
    try:
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.utils.config import validate_config
    except ImportError as e:
        raise RuntimeError(f"checking the PPO config needs veRL ({e}): "
                           "pip install -e '.[train]'") from e

    cfg = compose_ppo_config(overrides, config_dir)
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg),
                    use_critic=need_critic(cfg))
    return cfg
