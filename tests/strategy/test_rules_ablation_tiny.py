"""``rules_ablation --size tiny``: the six rule modes give six different runs, each for its reason.

One in-process run of the preset (FakeGrid, the real ServerApp / ClientApp code, scripted agents,
Presidio). What docs/rules.md's mode table says each step adds, checked in the run's files:

- NR → SR: ``P_in`` fires on third parties' addresses (``query_rules_fired``; the user's own
  and the addressee's stay, issue 28), initial local rules redact names;
- SR → LE: clients without a PERSON rule create one when a name reaches a response uncovered;
- LE → G2L: the adopted ``dates_places_response`` redacts calendar dates and places, and
  Δ-count feedback moves H;
- LE → L2G: candidates are promoted and their query twin redacts names in the round-2 queries
  (``P_in`` fires more often);
- G2L / L2G → full: both (the twin comes from feedback-confirmed ``names_response``).

On Mind2Web-SC each client's guard sees the safety rules it holds, so the recall of denials
(LPR) follows the modes (checked with the guard metrics recomputed by hand from the files).
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from pfedma_flwr.data.bench_agentic import MIND2WEB_SC_RULES as RULES

pytestmark = pytest.mark.slow
logger = logging.getLogger(__name__)
MODES = ("NR", "SR", "LE", "G2L", "L2G", "full")
DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.fixture(scope="module")
def runs(tiny_preset) -> dict[str, Path]:
    # the same tiny run test_experiments checks for its table (one run per session)
    result, out = tiny_preset("rules_ablation")
    logger.warning("rules_ablation tiny:\n%s", (out / "results.md").read_text())
    assert {r["labels"]["rules"] for r in result["rows"]} == set(MODES)
    return {m: out / "runs" / f"rules={m}" for m in MODES}


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _claims(run: Path) -> str:
    return "\n".join(json.dumps(q["z_claims"]) for q in _lines(run / "queries.jsonl"))


def _rules_log(run: Path) -> list[dict[str, Any]]:
    return [r["rules"] for r in _lines(run / "rounds.jsonl")]


def test_the_six_queries_files_are_pairwise_different(runs):
    digests = {m: hashlib.md5((runs[m] / "queries.jsonl").read_bytes()).hexdigest()
               for m in MODES}
    assert len(set(digests.values())) == len(MODES), digests


def test_p_in_fires_in_every_mode_but_nr(runs):
    fired = {m: sum(q["query_rules_fired"] for q in _lines(runs[m] / "queries.jsonl"))
             for m in MODES}
    assert fired["NR"] == 0
    assert all(fired[m] > 0 for m in MODES if m != "NR"), fired


def _quotes_in_clear(run: Path) -> int:
    """Claims of ``z`` quoting a task's items without a single placeholder."""
    return sum(c.startswith("I will include:") and "[REDACTED" not in c
               for q in _lines(run / "queries.jsonl") for c in q["z_claims"])


def test_local_evolution_redacts_names_static_rules_leave(runs):
    assert "[REDACTED" not in _claims(runs["NR"])
    assert "[REDACTED:PERSON]" in _claims(runs["SR"])
    # SR's clients without a PERSON rule quote names in clear; under LE they create the rule
    assert _quotes_in_clear(runs["LE"]) < _quotes_in_clear(runs["SR"])


def test_only_adoption_redacts_dates_and_places(runs):
    for m in MODES:
        claims = _claims(runs[m])
        adopted = "[REDACTED:DATE_TIME]" in claims or "[REDACTED:LOCATION]" in claims
        assert adopted is (m in ("G2L", "full")), m


def _fired(run: Path) -> int:
    return sum(q["query_rules_fired"] for q in _lines(run / "queries.jsonl"))


def test_only_promotion_modes_add_query_twins_that_act_in_round_two(runs):
    for m in MODES:
        twins = [t for log in _rules_log(runs[m]) for t in log.get("update", {}).get("twins", ())]
        assert bool(twins) is (m in ("L2G", "full")), m
    # the twin acts on the round-2 queries: P_in fires more than without promotion
    assert _fired(runs["L2G"]) > _fired(runs["LE"])
    assert _fired(runs["full"]) > _fired(runs["G2L"])
    assert sum(log.get("promoted", 0) for log in _rules_log(runs["L2G"])) > 0


def test_feedback_moves_h_where_rules_are_redistributed(runs):
    for m in MODES:
        logs = _rules_log(runs[m])
        rows = sum(log.get("feedback", {}).get("n_rows", 0) for log in logs)
        h = [log.get("h_scores", {}) for log in logs]
        moved = {rid for rid, v in (h[-1] if h else {}).items() if v[:2] != [0.0, 0]}
        # the server rates the query rules P_in applied (clients' rows for query rules are
        # ignored, rules/server/feedback.py): those H move wherever the server runs global rules
        server = {rid for log in logs for rid in log.get("server_rated", ())}
        assert moved >= server, m
        # clients' Δ-count rows exist only where rules are redistributed, and only they move
        # the H of the rules the server did not rate itself
        assert (rows > 0, bool(moved - server)) == ((True, True) if m in ("G2L", "full")
                                                    else (False, False)), m
        if m in ("NR", "SR", "LE"):
            assert not moved and not server, m


def _guard_by_hand(run: Path) -> dict[str, float]:
    """LPA, LPR, EA of the run's Mind2Web-SC decisions, from queries.jsonl and the data file."""
    rows = json.loads(gzip.open(DATA / "mind2web_sc" / "sample_labeled_all.json.gz").read())
    tp = tn = n = pos = explained = 0
    for q in _lines(run / "queries.jsonl"):
        if q["benchmark"] != "mind2web_sc":
            continue
        row = rows[int(q["query_id"].rsplit("-", 1)[1])]  # ids are row based
        denied = q["answer"] == "deny"
        named = {c.split(":", 1)[0] for c in q["z_claims"] if re.match(r"R[1-6]: ", c)}
        gold = {f"R{RULES.index(row['violation']) + 1}"} if row["label"] == 1 else set()
        n += 1
        pos += row["label"] == 1
        tp += denied and row["label"] == 1
        tn += not denied and row["label"] == 0
        explained += denied and row["label"] == 1 and gold <= named
    return {"LPA": (tp + tn) / n, "LPR": tp / pos, "EA": explained / pos}


def test_guard_metrics_by_hand_and_the_modes_bound_recall(runs):
    table_path = next(iter(runs.values())).parent.parent / "results.csv"
    with open(table_path, newline="", encoding="utf-8") as f:
        table = {r["rules"]: r for r in csv.DictReader(f)}
    lpr = {}
    for m in MODES:
        hand = _guard_by_hand(runs[m])
        for k, v in hand.items():
            assert float(table[m][k]) / 100 == pytest.approx(v, abs=1e-5), (m, k)
        lpr[m] = hand["LPR"]
    # each client's guard sees only the safety rules it holds (tests/unit/test_guard_rules.py):
    # none under NR, its expertise's under SR, + its partition's under LE / L2G, + adopted
    # server rules under G2L / full
    # (a bound, not a strict order: 8 actions need not hold a violation of each extra rule)
    assert lpr["NR"] == 0.0
    assert lpr["SR"] <= lpr["LE"] == lpr["L2G"] <= lpr["G2L"] == lpr["full"], lpr
    assert lpr["NR"] < lpr["full"], lpr
