"""Property tests: no generated payload makes anything but a coded SchemaError cross the seam.

Three targets (issue 13 item 1): the server's reply decoder, the client's instruction decoder
(and the handshake description decoder), and the strategy's aggregation of a whole round of
hostile replies over the real engine. Payloads are valid messages with one or more values
replaced by a hostile value of any kind (huge or long number literals, non-finite floats, lone
surrogates and control characters, wrong types, deep nesting, unknown or duplicate keys), so
the class of input is covered rather than a list of examples. CI runs the ``ci`` profile
(200 examples per target); ``bench/bench_fuzz.py`` runs >= 10,000.
"""

from __future__ import annotations

import json
import re
from typing import Any

from flwr.app import ConfigRecord, Message, RecordDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pfedma_flwr.protocol.codec import (
    PAYLOAD_KEY,
    ClientDescription,
    decode_description,
    decode_instruction,
    decode_reply,
)
from pfedma_flwr.protocol.schema import (
    Claim,
    ClientReply,
    GlobalRule,
    ProcessedResponse,
    RespondInstruction,
    RoutedQuery,
    RuleCandidate,
    RuleFeedback,
    SchemaError,
    StructuredResponse,
)
from pfedma_flwr.protocol.validation import CODES

settings.register_profile("ci", max_examples=200, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("bench", max_examples=10_000, deadline=None, database=None,
                          suppress_health_check=list(HealthCheck))
settings.load_profile("ci")

# Literals json.dumps cannot write (or writes only as they are): spliced into the text.
RAW_LITERALS = ["9" * 5000, "-" + "9" * 400, "9" * 21, "1e999", "-1e999", "NaN", "Infinity",
                "-Infinity", "0." + "1" * 5000, "1" + "0" * 400 + ".5", '"\\ud800"',
                '"\\udfff x"', '"a\\u0000b"', '"\\u001b[2J"', '"\\u2028"', "[" * 40 + "]" * 40,
                '{"a": 1, "a": 2}', "1.7976931348623157e309", "-0", "[]", "{}", "true"]
NASTY_CHARS = ["\ud800", "\udfff", "\x00", "\x1b", "\x7f", "\x85", "\u2028", "\u202e", "\ufeff",
               "\uffff", "\U0001f600", "é", '"', "\\", "{", "[", "\n", "\t"]

# about one char in four is nasty, so many strings are clean and the message still parses
_text = st.text(alphabet=st.one_of(st.characters(), st.characters(), st.characters(),
                                   st.sampled_from(NASTY_CHARS)), max_size=40)
_scalar = st.one_of(
    st.none(), st.booleans(), _text,
    st.integers(min_value=-(10**25), max_value=10**25),
    st.floats(allow_nan=True, allow_infinity=True),
    st.builds(lambda n, c: c * n, st.integers(0, 20_000), st.sampled_from(["x", "\ud800", "9"])),
)
hostile_value = st.recursive(
    _scalar, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                    st.dictionaries(_text, kids, max_size=4)),
    max_leaves=12)


def _reply_base(query_ids: list[str]) -> dict[str, Any]:
    resp = StructuredResponse("7", (Claim("The answer is 7.", ("7 = 3 + 4",)),), 0.9, 0.8)
    return ClientReply(
        responses=tuple(ProcessedResponse(q, resp, tokens=3) for q in query_ids),
        candidates=(RuleCandidate("Redact EMAIL_ADDRESS in responses.", "contact",
                                  entity_types=("EMAIL_ADDRESS",)),),
        feedback=(RuleFeedback("g1", 2, 1, 1),), backend_calls=1, tokens=3, gen_seconds=0.1,
        extra={"latency": 0.5},
    ).to_dict()


def _instruction_base() -> dict[str, Any]:
    return RespondInstruction(
        3, (RoutedQuery("gsm8k-1", "What is 3 + 4?", "math", 2, "verify 7", "number"),),
        (GlobalRule(rule_id="g1", text="Redact emails.", category="contact", patterns=(r"\d{3}",)),),
    ).to_dict()


def _description_base() -> dict[str, Any]:
    return ClientDescription("math-expert", ("math",), "A careful mathematician.",
                             client_key="partition-1").to_dict()


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


def _set(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    obj[path[0]] = _set(obj[path[0]], path[1:], value)
    return obj


def _like(draw: st.DrawFn, old: Any) -> Any:
    """A value of the same JSON type as ``old`` (so the message often still parses)."""
    if isinstance(old, bool):
        return draw(st.booleans())
    if isinstance(old, int):
        return draw(st.integers(min_value=-(10**25), max_value=10**25))
    if isinstance(old, float):
        return draw(st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                              st.floats(0.0, 1.0)))
    if isinstance(old, str):
        return draw(st.one_of(_text, st.builds(lambda n, c: c * n, st.integers(0, 9000),
                                               st.sampled_from(["x ", "9", "\x00", "é"]))))
    return draw(hostile_value)


@st.composite
def mutated_payload(draw: st.DrawFn, base: dict[str, Any]) -> str:
    """``base`` as JSON with 1-3 values replaced (or keys added), sometimes by raw literals."""
    obj = json.loads(json.dumps(base))
    raws: list[str] = []
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 3]))):
        # never the root: whole-message garbage is the ``_text`` alternative's job
        path = draw(st.sampled_from(_paths(obj)[1:]))
        kind = draw(st.sampled_from(["like", "like", "like", "value", "raw", "new_key"]))
        old: Any = obj
        for p in path:
            old = old[p]
        if kind == "raw":
            raws.append(draw(st.sampled_from(RAW_LITERALS)))
            value: Any = f"__RAW{len(raws) - 1}__"
        elif kind == "like":
            value = _like(draw, old)
        else:
            value = draw(hostile_value)
        if kind == "new_key" and path:
            target = obj
            for p in path[:-1]:
                target = target[p]
            if isinstance(target, dict):
                target[draw(_text)] = value
                continue
        obj = _set(obj, path, value)
    text = json.dumps(obj, allow_nan=True)
    for i, raw in enumerate(raws):
        text = text.replace(f'"__RAW{i}__"', raw)
    if draw(st.integers(0, 7)) == 0 and text.startswith("{"):  # a duplicated key, textually
        text = '{"schema_version": 1, ' + text[1:]
    return text


def _content(text: str) -> RecordDict:
    return RecordDict({PAYLOAD_KEY: ConfigRecord({"json": text})})


_CODE = re.compile(r"schema:[A-Za-z0-9_]+$")


def assert_coded(e: SchemaError) -> None:
    """A rejection has a fixed code and a bounded, printable message."""
    assert e.code in CODES or _CODE.match(e.code), e.code
    assert len(str(e)) <= 400 and len(e.coded()) <= 500
    str(e).encode("utf-8")  # no lone surrogate reaches a log line


def check_decoder(decode: Any, text: str) -> str:
    """``"ok"`` or the rejection code; anything else raised fails the property."""
    try:
        decode(_content(text))
    except SchemaError as e:
        assert_coded(e)
        return e.code
    return "ok"


payloads = st.one_of(mutated_payload(_reply_base(["q1", "q2"])),
                     mutated_payload(_reply_base(["q1", "q2"])), _text,
                     st.sampled_from(RAW_LITERALS))


@given(payloads)
def test_reply_decoder_only_raises_coded_schema_errors(text: str):
    check_decoder(decode_reply, text)


@given(st.one_of(mutated_payload(_instruction_base()), _text))
def test_instruction_decoder_only_raises_coded_schema_errors(text: str):
    check_decoder(decode_instruction, text)


@given(st.one_of(mutated_payload(_description_base()), _text))
def test_description_decoder_only_raises_coded_schema_errors(text: str):
    check_decoder(decode_description, text)


def test_fuzz_corpus_hits_acceptance_and_every_rejection_code():
    """The generators are not vacuous: fixed samples reach ok and the codes that matter."""
    base = _reply_base(["q1"])
    good = json.dumps(base)
    seen = {check_decoder(decode_reply, good)}
    for raw in ["9" * 5000, "1e999", '"\\ud800"', "[" * 40 + "]" * 40]:
        seen.add(check_decoder(decode_reply, good.replace('"tokens": 3,', f'"tokens": {raw},', 1)))
    seen.add(check_decoder(decode_reply, good.replace('{"schema_version": 1,',
                                                      '{"schema_version": 1, "tokens": 1,')))
    seen.add(check_decoder(decode_reply, good[:-3]))
    assert seen == {"ok", "int_too_long", "bad_float", "schema:tokens", "too_deep",
                    "duplicate_key", "bad_json"}


# --------------------------------------------------------------------------- aggregation


class StrategyHarness:
    """A real PFedMA strategy and engine over a FakeGrid; each round's replies are given."""

    def __init__(self) -> None:
        from client_apps.agent_app import app as client_app
        from pfedma_flwr.config import load_config
        from pfedma_flwr.data.split import sample_eval_tasks
        from pfedma_flwr.server.components import build_engine
        from pfedma_flwr.testing import FakeGrid
        from strategies.pfedma import PFedMA

        rc = {"config-name": "tiny", "overrides": "output.progress=false strategy.k_max=3"}
        cfg = load_config(rc)
        self.cfg = cfg
        self.grid = FakeGrid(client_app, 3, rc)
        tasks = sample_eval_tasks(cfg.data.benchmarks, cfg.data.queries_per_benchmark,
                                  cfg.seed, cfg.data.data_dir or None,
                                  dev_pool_per_benchmark=cfg.data.dev_pool_per_benchmark)
        self.finished: list[dict[str, Any]] = []
        engine = build_engine(cfg, tasks, on_query_end=self.finished.append)
        self.strategy = PFedMA(engine=engine, min_nodes=3, limits=cfg.protocol)
        engine.register_clients(self.strategy.handshake(self.grid, list(self.grid.node_ids)))
        self.round = 0

    def step(self, payloads: list[str]) -> dict[str, str]:
        """One round in which the k-th selected node answers ``payloads[k]``; its failures."""
        from flwr.app import ArrayRecord

        self.round += 1
        msgs = list(self.strategy.configure_train(self.round, ArrayRecord(), ConfigRecord(),
                                                  self.grid))
        replies = [Message(_content(payloads[k % len(payloads)]), reply_to=m)
                   for k, m in enumerate(msgs)]
        for r, m in zip(replies, msgs, strict=True):  # replies come from their destination
            r.metadata.__dict__["_src_node_id"] = m.metadata.dst_node_id
        self.strategy.aggregate_train(self.round, replies)
        return dict(self.strategy.engine.last_round_record.get("failures", {}))


_HARNESS: list[StrategyHarness] = []


def harness() -> StrategyHarness:
    if not _HARNESS or _HARNESS[0].strategy.engine.done:
        _HARNESS[:] = [StrategyHarness()]
    return _HARNESS[0]


def round_payloads(query_ids: list[str]) -> st.SearchStrategy[list[str]]:
    """Per node: a valid reply, or one with hostile values that often still parses."""
    valid = json.dumps(_reply_base(query_ids))
    return st.lists(st.one_of(st.just(valid), mutated_payload(_reply_base(query_ids)), _text),
                    min_size=3, max_size=3)


QIDS = ["gsm8k-test-0", "gsm8k-test-1", "medqa-test-0"]


@settings(max_examples=60)
@given(st.data())
def test_strategy_aggregation_never_raises(data: st.DataObject):
    h = harness()
    active = [q.task.task_id for q in h.strategy.engine._active] or QIDS
    payloads = data.draw(round_payloads(active))
    failures = h.step(payloads)
    for why in failures.values():
        assert len(why) < 400
        why.encode("utf-8")


@given(st.lists(st.one_of(_text, st.sampled_from(NASTY_CHARS)), min_size=1, max_size=5))
def test_embedder_never_raises_on_any_string(texts: list[str]):
    """Defence in depth behind the seam: a lone surrogate once made MiniLM's tokenizer raise."""
    from pfedma_flwr.embeddings import HashingEmbedder, safe_text

    m = HashingEmbedder().encode(texts)
    assert m.shape == (len(texts), 256)
    for t in texts:
        safe_text(t).encode("utf-8")
    assert safe_text("a\ud800b") == "a\ufffdb" and safe_text("ok") == "ok"
