"""veRL agent loop with a fake server manager and a tiny offline ChatML tokenizer.

Skipped without veRL (``pip install -e '.[train]'``). The tokenizer is a byte-level BPE trained
here on a few sentences, so nothing is downloaded; the server manager returns scripted replies.
"""

import asyncio
import json

import pytest

pytest.importorskip("verl", reason="veRL is the optional 'train' extra (pip install -e '.[train]')")
pytest.importorskip("verl.experimental.agent_loop",
                    reason="veRL's agent loop needs cachetools, uvicorn and fastapi")

from omegaconf import OmegaConf  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from pfedma_flwr.training import agent_loop as al  # noqa: E402
from pfedma_flwr.training.reward import compute_score  # noqa: E402
from tests.unit.test_training_episode import QID, TASK, answer, clients  # noqa: E402

CHATML = ("{% for m in messages %}{{'<|im_start|>' + m['role'] + '\n' + m['content'] + "
          "'<|im_end|>\n'}}{% endfor %}{% if add_generation_prompt %}"
          "{{'<|im_start|>assistant\n'}}{% endif %}")


def build_tokenizer():
    """A byte-level BPE ChatML tokenizer trained here (Qwen's special tokens, no download)."""
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = ["<select>a,b</select> <stop/> <think>z agrees</think>",
              "Candidate agents: id=a domains=[math] C: math=0.50; S=0.50; asked=0",
              "Collaborative answer z: none yet. Query (domain math, round 1)"]
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>")
    fast.chat_template = CHATML
    return fast


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


class FakeServer:
    """Scripted policy: one reply per call; records prompts and request ids."""

    def __init__(self, tokenizer, replies):
        self.tok, self.replies, self.calls = tokenizer, list(replies), []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.calls.append((request_id, list(prompt_ids)))
        ids = self.tok.encode(self.replies.pop(0) + "<|im_end|>", add_special_tokens=False)
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))


@pytest.fixture()
def replay(tmp_path):
    lines = [{"kind": "client", "client_id": k, "description": d.to_dict()}
             for k, d in clients().items()]
    for (c, t, v) in [("a", 1, "4"), ("b", 1, "4"), ("c", 1, "5"), ("c", 2, "4")]:
        lines.append({"kind": "answer", "query_id": QID, "client_id": c, "round": t,
                      "response": answer(v).to_dict()})
    path = tmp_path / "replay.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    al.load_cache.cache_clear()
    return str(path)


ROW = {
    "raw_prompt": [{"role": "user", "content": TASK.question}],
    "extra_info": {"split": "train", "index": 0, "task_id": QID, "benchmark": "math",
                   "domain": "math", "answer_kind": "number", "options_json": "{}"},
    "reward_model": {"style": "rule", "ground_truth": "4"},
    "data_source": "pfedma/math",
}


def run_loop(tokenizer, replay, replies, *, response_length=2048, t_max=2, row=None):
    server = FakeServer(tokenizer, replies)
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {
        "prompt_length": 4096, "response_length": response_length}}})

    async def go():
        # AgentLoopBase captures the running loop: build it inside the coroutine
        loop = al.OrchestratorAgentLoop(
            trainer_config=DictConfigWrap(config), server_manager=server, tokenizer=tokenizer,
            processor=None, dataset_cls=None, data_config=DictConfigWrap(OmegaConf.create({})),
            hf_model_type="qwen2", name="pfedma_orchestrator", replay_path=replay,
            t_max=t_max, k_max=2, embedding="hashing")
        return await loop.run({"temperature": 1.0}, **(row or ROW))

    return asyncio.run(go()), server


def segments(tokenizer, out):
    """(mask, decoded text) runs of the response."""
    runs, start = [], 0
    mask = out.response_mask
    for k in range(1, len(mask) + 1):
        if k == len(mask) or mask[k] != mask[start]:
            runs.append((mask[start], tokenizer.decode(out.response_ids[start:k])))
            start = k
    return runs


def test_observations_are_masked_and_step_rewards_reach_compute_score(tokenizer, replay):
    out, server = run_loop(tokenizer, replay, ["<select>a,b</select>", "<stop/>"])
    runs = segments(tokenizer, out)
    assert [m for m, _ in runs] == [1, 0, 1]
    assert runs[0][1] == "<select>a,b</select><|im_end|>"
    # the observation: the next round's user message (z = 4 from a and b), never trained on
    assert "<|im_start|>user" in runs[1][1] and "Collaborative answer z: '4'" in runs[1][1]
    assert runs[2][1] == "<stop/><|im_end|>"
    assert len(out.response_logprobs) == len(out.response_ids)
    assert all(lp == -0.5 for lp, m in zip(out.response_logprobs, out.response_mask,
                                          strict=True) if m)
    # the prompt is the orchestrator's round-1 prompt, not the bare question
    assert "Candidate agents:" in tokenizer.decode(out.prompt_ids)
    # one sticky request id over the turns
    assert len({rid for rid, _ in server.calls}) == 1 and len(server.calls) == 2
    ex = out.extra_fields
    assert ex["format_ok"] and ex["correct"] and ex["step_correct"] == [1.0]
    assert ex["num_selected"] == [2] and not ex["truncated"]
    # veRL merges extra_fields into extra_info: 0 + 1 + 0.2·1 − 0.01·2 = 1.18
    extra_info = {**ROW["extra_info"], **ex, "num_turns": out.num_turns}
    assert compute_score("pfedma/math", "", "4", extra_info)["score"] == pytest.approx(1.18)


def test_round_budget_caps_the_turns(tokenizer, replay):
    out, server = run_loop(tokenizer, replay,
                           ["<select>c</select>", "<select>c,a</select>", "<select>a</select>"])
    # T_max 2: two policy turns, the third reply is never requested
    assert len(server.calls) == 2 and server.replies == ["<select>a</select>"]
    assert out.extra_fields["step_correct"] == [0.0, 1.0]
    assert out.extra_fields["stop_reason"] == "t_max"
    assert [m for m, _ in segments(tokenizer, out)] == [1, 0, 1]


def test_malformed_action_is_kept_in_the_trajectory_and_fails_the_format(tokenizer, replay):
    out, _ = run_loop(tokenizer, replay, ["pick a", "<stop/>"])
    assert segments(tokenizer, out)[0] == (1, "pick a<|im_end|>")
    assert not out.extra_fields["format_ok"]
    assert out.extra_fields["format_failures"] == {"no_action": 1}


def test_response_budget_ends_the_episode(tokenizer, replay):
    # 8 tokens: the first reply fills the budget, so no observation is merged and no second
    # generation is asked for
    out, server = run_loop(tokenizer, replay, ["<select>a,b</select>", "<stop/>"],
                           response_length=8)
    assert len(server.calls) == 1 and out.extra_fields["truncated"]
    assert len(out.response_ids) <= 8 and set(out.response_mask) == {1}


def test_build_data_rows_feed_the_loop_through_verl_dataset(tokenizer, replay, tmp_path):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from pfedma_flwr.training.data import task_row, write_parquet

    write_parquet([task_row(TASK, split="train", index=0)], tmp_path / "train.parquet")
    ds = RLHFDataset(str(tmp_path / "train.parquet"), tokenizer, OmegaConf.create({
        "max_prompt_length": 512, "filter_overlong_prompts": False,
        "cache_dir": str(tmp_path / "cache")}))
    item = ds[0]
    assert item["agent_name"] == "pfedma_orchestrator"
    assert item["reward_model"]["ground_truth"] == "4"
    assert item["raw_prompt"][-1]["content"] == TASK.question
    row = {k: item[k] for k in ("raw_prompt", "extra_info", "reward_model", "data_source")}
    out, _ = run_loop(tokenizer, replay, ["<select>a,b</select>", "<stop/>"], row=row)
    assert out.extra_fields["correct"] and out.extra_fields["step_correct"] == [1.0]


def test_reward_file_loads_through_verl_config(tmp_path):
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from pfedma_flwr.training import reward

    fn = get_custom_reward_fn(OmegaConf.create({"reward": {"custom_reward_function": {
        "path": reward.__file__, "name": "compute_score",
        "reward_kwargs": {"cost_coe": 1e-4}}}}))
    extra = {"format_ok": True, "correct": True, "step_correct": [0, 1], "num_selected": [2, 1],
             "tokens": 1500}
    # 1.17 − 1e-4·1500 = 1.02: the config's reward_kwargs reach compute_score
    assert fn(data_source="pfedma/math", solution_str="", ground_truth="4",
              extra_info=extra)["score"] == pytest.approx(1.02)
