"""No client, and no minority of clients, steers what every client redacts or which answer wins.

Issue 30 "Done when", end to end over the in-process grid: each measured attack class (and
variants beyond them) replayed by ``tests/strategy/steering.py`` on 5 nodes of scripted agents
keeps the accuracy within 10 points of the all-honest run of the same seed, alters no task and
no honest final answer, and leaves every rule of the server's initial policy active. Measured
before the fixes (``bench/bench_steering.py``, docs/threat_model.md): answer-redacting rule
0.85 → 0.70, with wrong answers 0.60; query patterns altered 4–5 tasks; two colluders 0.40;
a twin plus one −1 row switched a seeded rule off; an injected answer reached 8 refinements.
"""

from __future__ import annotations

from functools import cache

import pytest

from tests.strategy.steering import ATTACKS, Replay, replay

SEEDS = [0, pytest.param(1, marks=pytest.mark.slow)]


@cache
def honest(seed: int) -> Replay:
    return replay(None, seed)


def _common(r: Replay, base: Replay) -> None:
    assert r.status == "completed"
    assert r.accuracy >= base.accuracy - 0.10 - 1e-9, (r.accuracy, base.accuracy)
    assert r.altered_tasks == base.altered_tasks == 0
    assert r.altered_answers == 0 and r.honest_answers > 0
    assert r.seeded_active == r.seeded_total == base.seeded_total == 4
    assert r.injected_in_refinement == 0


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_attack_steers_nothing(attack: str, seed: int):
    base, r = honest(seed), replay(attack, seed)
    _common(r, base)
    bad = {f"partition-{i}" for i in ATTACKS[attack][1]}
    if attack.startswith(("1_", "2_", "v_paraphrased")):
        # every candidate was refused as unsafe, and counted against its sender only
        assert r.unsafe_by_client and set(r.unsafe_by_client) <= bad
        assert r.global_active == base.global_active  # nothing was promoted
    if attack == "v_entity_numbers_pair":
        # two supporters promote it (regex recognizer: none of its types fires on a bare
        # answer; a recognizer that does is refused, tests/unit/test_rules_support.py)
        assert r.global_active == base.global_active + 1
    if attack == "6_stale_replay":
        assert "stale round" in r.rejected_reasons
    if attack == "6_inflated_counters":
        # a self-reported 10^9 tokens is refused at the seam; cost columns stay the honest ones
        assert any("schema:tokens" in f for f in r.failures)
        assert r.tokens_per_query <= 2 * base.tokens_per_query
        assert r.summary["cost_basis"]["tokens"] == "client-reported"
    if attack == "6_long_ids":
        # 256 rejected 128-char ids per round: 16 excerpts per client and a count
        assert r.rounds_bytes < 3 * base.rounds_bytes  # was 749 KB against 24 KB
        logged = [x for rd in r.rounds for x in rd["rejected"]]
        assert all(len(x["query_id"]) <= 40 for x in logged)
        assert any(x["reason"] == "more" and x["n"] > 200 for x in logged)


def test_singleton_promotion_is_an_explicit_setting():
    # the paper's singleton case stays available as an explicit setting: one honest-looking
    # client's safe candidate is promoted from a one-candidate pool
    r = replay("v_safe_singleton", 0, "rules.min_support_clients=1 rules.min_support_share=0.0")
    assert r.global_active > honest(0).global_active
    r = replay("v_safe_singleton", 0)  # the default: one client is no support
    assert r.global_active == honest(0).global_active
