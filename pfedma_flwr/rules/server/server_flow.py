"""The server's rule flows of one Flower round (DESIGN §3.1–3.5), per ``rules.mode``.

Feedback moves H wherever rules are redistributed (full, G2L); the candidate pool, promotion
and Resolve run where clients upload (full, L2G). docs/rules.md has the mode table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from typing import Any

import numpy as np

from pfedma_flwr.embeddings import Embedder
from pfedma_flwr.protocol.schema import ClientReply
from pfedma_flwr.rules.modes import RuleMode
from pfedma_flwr.rules.pii import PiiRecognizer
from pfedma_flwr.rules.server.global_repo import GlobalRuleRepository
from pfedma_flwr.rules.server.promotion import build_candidate_pool

# Which rule flows run on the server per rules.mode (DESIGN §5 ablations NR/SR/LE/G2L/L2G):
# promotion where clients upload, redistribution where they adopt (one definition: RuleMode).
PROMOTE_MODES = tuple(m.config_name for m in RuleMode if m.upload)
REDISTRIBUTE_MODES = tuple(m.config_name for m in RuleMode if m.adopt)


def _asdict(obj: Any) -> Any:
    return asdict(obj) if is_dataclass(obj) and not isinstance(obj, type) else obj


def h_scores(rules: GlobalRuleRepository) -> dict[str, list[Any]]:
    """``rule_id -> [H, N, active]`` of every global rule (the round log's view)."""
    return {r.rule_id: [r.h_score, r.n_evals, r.active] for r in rules.rules()}


def evolve_global_rules(
    *, mode: str, rules: GlobalRuleRepository, server_round: int,
    replies: Mapping[str, ClientReply], client_ok: Mapping[str, bool], embedder: Embedder,
    sim_threshold: float, rng: np.random.Generator, recognizer: PiiRecognizer | None = None,
    query_fired: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """Feedback → H-scores, then pool → promotion → Resolve; return the round's rules log.

    Parameters
    ----------
    mode : str
        ``rules.mode``; NR, SR and LE run nothing on the server.
    rules : GlobalRuleRepository
        The server's repository, updated in place.
    server_round : int
        The Flower round (stamped on promoted rules).
    replies : Mapping[str, ClientReply]
        This round's validated replies (their feedback and candidates).
    client_ok : Mapping[str, bool]
        Per client: at least one of its answers was retained this round. Only those clients
        contribute candidates: retention is per query round, a candidate is not tied to one
        query (issue 12).
    embedder : Embedder
        Clusters candidates by canonical text.
    sim_threshold : float
        Cosine of "same semantic constraint".
    rng : numpy.random.Generator
        The engine's generator (the pool's per-client pick), so a resumed run stays identical.
    recognizer : PiiRecognizer, optional
        The server's recognizer: candidates' entity types are probed with it.
    query_fired : Mapping[str, int], optional
        Query rules ``P_in`` applied while planning this round: the server rates those
        (client rows for query rules are ignored; rules/server/feedback.py).
    """
    if mode not in PROMOTE_MODES and mode not in REDISTRIBUTE_MODES:
        return {"mode": mode, "promoted": 0}
    # a client rates only rules it was sent, at most one trigger per response of its reply
    fb = rules.apply_feedback({c: r.feedback for c, r in replies.items()}, check_held=True,
                              max_triggers={c: len(r.responses) for c, r in replies.items()})
    rated = rules.apply_server_feedback(query_fired or {})
    log: dict[str, Any] = {"mode": mode, "promoted": 0, "feedback": _asdict(fb),
                           **({"server_rated": rated} if rated else {})}
    if mode not in PROMOTE_MODES:
        return {**log, "h_scores": h_scores(rules)}
    retained = {c for c, ok in client_ok.items() if ok}
    pool = build_candidate_pool({c: r.candidates for c, r in replies.items()}, retained,
                                embedder, sim_threshold=sim_threshold, rng=rng,
                                recognizer=recognizer)
    up = rules.update(server_round, pool)
    return {
        **log, "update": _asdict(up), "promoted": up.promoted, "pool_size": len(pool.candidates),
        # Candidates no node could run safely or that would alter task text or answers (by
        # source client), and those past a client's per-round cap.
        "pool_invalid": sum(bool(p) for p in pool.problems), "pool_capped": pool.n_capped,
        **({"unsafe_by_client": dict(pool.unsafe_by_client)} if pool.unsafe_by_client else {}),
        "quarantined": rules.quarantined, "h_scores": h_scores(rules),
    }
