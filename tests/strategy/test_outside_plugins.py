"""Issue 31's three outside plug-ins (examples/plugins/), each one file plus ``--set`` keys.

An orchestrator (highest C for the domain, one round, an option), an aggregator (a
confidence-weighted median, an option) and a strategy (two random agents, majority vote), run
over the FakeGrid exactly as docs/extending.md tells a user to select them; a bad option or
name is refused by the launcher's preflight, before any process starts, naming the key.
"""

from __future__ import annotations

import pytest

from examples.plugins.weighted_median import weighted_median
from pfedma_flwr.aggregation.consensus import RoundResponse
from pfedma_flwr.config import ConfigError, load_config
from pfedma_flwr.experiments.preflight import name_problems, option_problems
from pfedma_flwr.protocol.schema import StructuredResponse
from pfedma_flwr.routing.state import PRIOR
from pfedma_flwr.server.components import build_aggregator, build_orchestrator
from tests.strategy.conftest import read_jsonl

HIGHEST_C = "examples.plugins.highest_c:HighestC"
MEDIAN = "examples.plugins.weighted_median:weighted_median"
TWO_RANDOM = "examples.plugins.two_random:TwoRandomVote"


def _cfg(overrides: str):
    return load_config({"config-name": "tiny", "overrides": overrides})


def _r(cid: str, answer: str, conf: float, *, anomaly: float = 0.0, retained: bool = True,
       rnd: int = 1) -> RoundResponse:
    return RoundResponse(client_id=cid, round=rnd, retained=retained, anomaly=anomaly,
                         response=StructuredResponse(final_answer=answer, self_confidence=conf))


def test_weighted_median_by_hand():
    # weights 0.9, 0.1, 0.2 (sorted 10, 20, 30): half of 1.2 is reached at 10 -> support .75
    z = weighted_median([_r("a", "10", 0.9), _r("b", "20", 0.1), _r("c", "30", 0.2)],
                        kind="number", round=1)
    assert (z.answer, z.canonical, z.n_agreeing, z.n_retained) == ("10", "10", 1, 3)
    assert z.support == pytest.approx(0.9 / 1.2)
    # floor .5 lifts confidences 0, .3 and .4 to .5; an anomaly score of .5 halves a weight;
    # the filtered answer has no vote: 10 (w .5), 20 (w .5 * .5 = .25), 30 (w .5); half of
    # 1.25 is .625: 10 gives .5, 20 gives .75 -> 20, support .25 / 1.25
    z = weighted_median([_r("a", "10", 0.0), _r("b", "20", 0.3, anomaly=0.5),
                         _r("c", "30", 0.4), _r("d", "40", 1.0, retained=False)],
                        kind="number", round=2, floor=0.5)
    assert z.answer == "20" and z.n_retained == 3 and z.round == 2
    assert z.support == pytest.approx(0.25 / 1.25)
    # options answers are not numbers: the majority vote
    z = weighted_median([_r("a", "B", 0.1), _r("b", "B", 0.1), _r("c", "C", 0.9)],
                        kind="option", round=1, options={"B": "x", "C": "y"})
    assert z.canonical == "B" and z.n_agreeing == 2


def test_highest_c_orchestrator_with_an_option_runs_through_the_config(federation, tmp_path):
    summary, _ = federation(num_nodes=4, overrides=(
        f"routing.orchestrator={HIGHEST_C} routing.orchestrator_options.rounds=1"))
    assert summary["status"] == "completed"
    assert summary["orchestrator"]["name"] == "HighestC"
    queries = read_jsonl(tmp_path / "out" / "queries.jsonl")
    assert len(queries) == 6
    assert all(q["rounds"] == 1 and len(q["selections"]) == 1
               and len(q["selections"][0]) == 1 for q in queries)
    # one client per query still teaches C (routing.lone_answers: prior), so C can rank
    caps = [v for st in summary["routing"]["clients"].values()
            for v in st["capability"].values()]
    assert caps and any(v != PRIOR for v in caps)


def test_the_weighted_median_aggregator_replaces_pfedma_s_vote(federation, tmp_path):
    cfg = _cfg(f"strategy.aggregator={MEDIAN} strategy.aggregator_options.floor=0.2")
    agg = build_aggregator(cfg)
    assert agg.func is weighted_median and agg.keywords == {"floor": 0.2}
    assert build_aggregator(_cfg("")) is None  # the strategy keeps its own
    summary, _ = federation(num_nodes=4, overrides=(
        f"strategy.aggregator={MEDIAN} strategy.aggregator_options.floor=0.2"))
    assert summary["status"] == "completed"
    assert len(read_jsonl(tmp_path / "out" / "queries.jsonl")) == 6


def test_two_random_agents_majority_vote_strategy(federation, tmp_path):
    summary, _ = federation(num_nodes=4, overrides=f"strategy.name={TWO_RANDOM}")
    assert summary["status"] == "completed"
    queries = read_jsonl(tmp_path / "out" / "queries.jsonl")
    assert len(queries) == 6
    assert all(q["rounds"] == 1 and len(q["selections"][0]) == 2 for q in queries)
    assert len({tuple(q["selections"][0]) for q in queries}) > 1  # random, not one fixed pair


@pytest.mark.parametrize(("overrides", "key"), [
    ("routing.orchestrator_options.nope=1", "routing.orchestrator_options ['nope']"),
    ("anomaly.judge_options.nope=1", "anomaly.judge_options ['nope']"),
    ("strategy.aggregator=vote_all strategy.aggregator_options.kind=x",
     "strategy.aggregator_options ['kind']"),
    ("strategy.aggregator_options.floor=1", "strategy.aggregator is empty"),
])
def test_an_option_no_factory_takes_is_refused_before_the_run(overrides, key):
    msgs = [p.message for p in option_problems(_cfg(overrides))]
    assert len(msgs) == 1 and key in msgs[0]


def test_a_plugin_with_kwargs_takes_any_option_and_a_good_one_passes():
    assert option_problems(_cfg(f"routing.orchestrator={HIGHEST_C} "
                                "routing.orchestrator_options.rounds=2")) == []
    assert option_problems(_cfg("routing.orchestrator_options.exploration_c=0.5")) == []


def test_an_unknown_aggregator_name_is_a_preflight_problem_naming_the_key():
    msgs = [p.message for p in name_problems(_cfg("strategy.aggregator=median"))]
    assert any(m.startswith("strategy.aggregator: unknown aggregator 'median'") for m in msgs)


def test_options_reach_the_built_in_factory_and_a_bad_one_names_the_key():
    from pfedma_flwr.embeddings import get_embedder

    emb = get_embedder("hashing", None)
    o = build_orchestrator(_cfg("routing.orchestrator_options.exploration_c=0.5"), emb)
    assert o.exploration_c == 0.5
    with pytest.raises(ConfigError, match=r"routing.orchestrator_options \['nope'\]"):
        build_orchestrator(_cfg("routing.orchestrator_options.nope=1"), emb)
