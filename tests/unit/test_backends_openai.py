"""The OpenAI-compatible backend against a fake server: batches, retries, errors, health checks."""

import http.server
import json
import socket
import threading
import time

import pytest

from pfedma_flwr.agents.backends import MockBackend
from pfedma_flwr.agents.backends.base import BackendUnavailableError, GenerationResult
from pfedma_flwr.agents.backends.openai_backend import OpenAIBackend, response_format, strip_think
from pfedma_flwr.agents.prompting import RESPONSE_JSON_SCHEMA


def user(text):
    return [{"role": "user", "content": text}]


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
