"""The Flower seam (records) and configuration loading."""

import json

import pytest
from flwr.app import ConfigRecord, RecordDict

from pfedma_flwr.config import ConfigError, load_config, parse_overrides
from pfedma_flwr.protocol.codec import (
    PAYLOAD_KEY,
    ClientDescription,
    decode_description,
    decode_instruction,
    decode_reply,
    encode_description,
    encode_instruction,
    encode_reply,
)
from pfedma_flwr.protocol.schema import ClientReply, RespondInstruction, RoutedQuery, SchemaError


def test_record_round_trip():
    ins = RespondInstruction(1, (RoutedQuery("q", "What is 2+2?", "math", 1),))
    assert decode_instruction(encode_instruction(ins)) == ins
    rep = ClientReply(responses=())
    assert decode_reply(encode_reply(rep)) == rep
    d = ClientDescription("math-expert", ("math",), "A careful mathematician.")
    assert decode_description(encode_description(d)) == d


@pytest.mark.parametrize(
    "content, reason",
    [
        (RecordDict({}), "no ConfigRecord"),
        (RecordDict({PAYLOAD_KEY: ConfigRecord({"json": "{not json"})}), "invalid JSON"),
        (RecordDict({PAYLOAD_KEY: ConfigRecord({"json": b"bytes"})}), "JSON string"),
        (RecordDict({PAYLOAD_KEY: ConfigRecord({"json": '{"x": NaN}'})}), "non-finite"),
        (RecordDict({PAYLOAD_KEY: ConfigRecord({"json": "[" * 100000 + "]" * 100000})}), "deep"),
        (RecordDict({PAYLOAD_KEY: ConfigRecord({"json": json.dumps({"schema_version": 1})})}), "responses"),
    ],
)
def test_bad_replies_raise_schema_error(content, reason):
    with pytest.raises(SchemaError) as e:
        decode_reply(content)
    assert reason in str(e.value)


def test_load_config_defaults_and_overrides():
    cfg = load_config({"config-name": "tiny", "overrides": "strategy.t_max=3 rules.mode=LE"})
    assert cfg.strategy.t_max == 3 and cfg.rules.mode == "LE"
    assert cfg.agent.backend.name == "mock"
    cfg = load_config({"output-dir": "/tmp/x", "data-dir": "/tmp/d"})
    assert cfg.output.dir == "/tmp/x" and cfg.data.data_dir == "/tmp/d"


@pytest.mark.parametrize(
    "rc, match",
    [
        ({"overrides": "strategy.tmax=3"}, "tmax"),  # typo in a nested key
        ({"overrides": "strategy.t_max=0"}, "t_max"),  # out of range
        ({"overrides": "rules.mode=XX"}, "rules.mode"),
        ({"overrides": "anomaly.tolerance=abc"}, "tolerance"),  # wrong type
        ({"config-name": "nope"}, "not found"),
        ({"num-rounds": 3}, "unknown run-config"),
        ({"overrides": "novalue"}, "key=value"),
    ],
)
def test_config_errors_name_the_key(rc, match):
    with pytest.raises(ConfigError, match=match):
        load_config(rc)


def test_parse_overrides_quotes():
    d = parse_overrides("agent.backend.base_url='http://x:1/v1' data.benchmarks=[gsm8k]")
    assert d.agent.backend.base_url == "http://x:1/v1"


@pytest.mark.parametrize("config,overrides,cores,expected", [
    ("pfedma", "", 2, 2.0),                            # default: 2 llama.cpp threads per client
    ("pfedma", "agent.backend.n_threads=1", 2, 1.0),
    ("pfedma", "agent.backend.n_threads=8", 4, 4.0),   # capped: a client must fit the machine
    ("pfedma", "agent.backend.n_threads=0", 16, 16.0),  # 0 = all cores
    ("tiny", "", 2, 1.0),                              # mock backend: no model threads
    ("pfedma", "agent.backend.name=openai", 8, 1.0),   # endpoint clients only wait on HTTP
])
def test_launcher_reserves_llama_threads_as_ray_cpus(config, overrides, cores, expected):
    from pfedma_flwr.experiments.launch import cpus_per_client_for

    assert cpus_per_client_for(config, overrides, cpu_count=cores) == expected


def test_launcher_validates_config_before_starting():
    from pfedma_flwr.experiments.launch import cpus_per_client_for

    with pytest.raises(ConfigError, match="agent.few_shot_scope"):
        cpus_per_client_for("pfedma", "agent.few_shot_scope=round")


@pytest.mark.parametrize("text, code", [
    ('{"schema_version": 1, "responses": [], "tokens": ' + "9" * 5000 + "}", "int_too_long"),
    ('{"schema_version": 1, "responses": [], "gen_seconds": 1e999}', "bad_float"),
    ('{"schema_version": 1, "responses": [], "gen_seconds": 0.' + "1" * 100 + "}", "bad_float"),
    ('{"schema_version": 1, "schema_version": 1, "responses": []}', "duplicate_key"),
    ('{"schema_version": 1, "responses": [' + "{}," * 200_000 + "{}]}", "too_large"),
    ('{"schema_version": 1, "responses": ' + "[" * 17 + "]" * 17 + "}", "too_deep"),
    ('{"schema_version": 1, "responses": [{"query_id": "\\ud800", "response": null}]}',
     "bad_string"),
    ('{"schema_version": 1, "responses": [', "bad_json"),
])
def test_decoder_codes(text, code):
    with pytest.raises(SchemaError) as e:
        decode_reply(RecordDict({PAYLOAD_KEY: ConfigRecord({"json": text})}))
    assert e.value.code == code, e.value.coded()


def test_prescan_ignores_structure_inside_strings():
    # brackets, commas and escaped quotes inside strings are text, not nesting or values
    answer = '[[[[[[[[[[[[[[[[[[[[ \\" ,,,, {{{{ \\\\'
    text = ('{"schema_version": 1, "responses": [{"query_id": "q", "response": '
            '{"final_answer": "' + answer + '"}}]}')
    rep = decode_reply(RecordDict({PAYLOAD_KEY: ConfigRecord({"json": text})}))
    assert rep.responses[0].response.final_answer == '[[[[[[[[[[[[[[[[[[[[ " ,,,, {{{{ \\'


def test_value_cap_admits_the_fullest_valid_reply():
    from pfedma_flwr.protocol.codec import value_cap
    from pfedma_flwr.protocol.schema import Claim, Limits, ProcessedResponse, StructuredResponse

    lim = Limits(max_items=4, max_claims=3, max_evidence=2, max_rules=4)
    resp = StructuredResponse("1", tuple(Claim("c", ("e", "e")) for _ in range(3)))
    full = ClientReply(responses=tuple(ProcessedResponse(f"q{i}", resp) for i in range(4)))
    text = json.dumps(full.to_dict())
    n = text.count("{") + text.count("[") + text.count(",")
    assert n <= value_cap(lim)
    assert decode_reply(encode_reply(full), lim) == full


@pytest.mark.parametrize("claims, mode, keys, rejected", [
    # declared (simulation): the claim is the key; a key claimed twice goes to nobody
    ({1: ("partition-0", b""), 2: ("partition-1", b"")}, "declared",
     {1: "partition-0", 2: "partition-1"}, set()),
    ({1: ("partition-0", b""), 2: ("partition-0", b""), 3: ("partition-2", b"")}, "declared",
     {3: "partition-2"}, {1, 2}),
    ({1: ("", b"")}, "declared", {1: "node-1"}, set()),
    # node (deployment): the claim is ignored; the key's fingerprint is the identity
    ({1: ("partition-0", b"A" * 32), 2: ("partition-0", b"B" * 32)}, "node",
     {1: "key-" + __import__("hashlib").sha256(b"A" * 32).hexdigest()[:16],
      2: "key-" + __import__("hashlib").sha256(b"B" * 32).hexdigest()[:16]}, set()),
    ({7: ("partition-0", b"")}, "node", {7: "node-7"}, set()),
])
def test_assign_client_keys(claims, mode, keys, rejected):
    from pfedma_flwr.protocol.codec import assign_client_keys

    got, left_out = assign_client_keys(claims, mode)
    assert got == keys and set(left_out) == rejected
    assert all(w.startswith("duplicate_key") for w in left_out.values())


@pytest.mark.parametrize("key", ["partition-0@900", "a b", "x" * 129, "é", "../etc"])
def test_declared_client_key_must_be_log_and_file_safe(key):
    with pytest.raises(SchemaError) as e:
        ClientDescription.from_dict({"profile_name": "p", "description": "d", "client_key": key})
    assert e.value.code == "schema:client_key"


def test_description_announces_a_reasoning_way():
    d = ClientDescription("statistician", ("math",), "Computes.", reasoning="program")
    assert decode_description(encode_description(d)).reasoning == "program"
    # an old client that sends no way reasons in text
    assert ClientDescription.from_dict({"profile_name": "p", "description": "d"}).reasoning == "cot"
    for bad in ("oracle", ["program"], 1, None):
        with pytest.raises(SchemaError) as e:
            ClientDescription.from_dict({"profile_name": "p", "description": "d",
                                         "reasoning": bad})
        assert e.value.code == "schema:reasoning"


def test_reasoning_way_applies_to_computed_answers_only():
    from pfedma_flwr.protocol.wire import reasoning_way

    assert reasoning_way("program", "number") == "program"
    assert [reasoning_way("program", k) for k in ("option", "math", "text")] == ["cot"] * 3
    assert reasoning_way("cot", "number") == "cot"


def test_protocol_section_is_the_wire_limits_and_takes_overrides():
    # one definition: the config section is the frozen value the decoders use
    from pfedma_flwr.protocol.validation import Limits

    cfg = load_config({"overrides": "protocol.max_id_chars=40 protocol.max_depth=9"})
    assert cfg.protocol == Limits(max_id_chars=40, max_depth=9)
    assert load_config({}).protocol == Limits()
    with pytest.raises(ConfigError, match=r"protocol.max_depth must be an integer >= 1"):
        load_config({"overrides": "protocol.max_depth=0"})
    with pytest.raises(ConfigError, match="max_items"):
        load_config({"overrides": "protocol.max_items=lots"})
