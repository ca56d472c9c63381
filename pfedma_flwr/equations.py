"""Every PFedMA formula in one place (re-exports of the implementing functions).

| name | formula | source |
|---|---|---|
| :func:`support_proportions` | ``ζ_i = Supp(ω̄_i) / max(1, |B|−1)``, Supp counts ``j ≠ i`` with cos ≥ 0.9 | seed App. F; DESIGN §3.2 |
| :func:`promote` | ``G = B`` if ``|B| = 1``; ``{i : ζ_i = max ζ}`` if ``max ζ > 0``; else ``∅`` | seed App. F; DESIGN §3.2 |
| :func:`feedback_score` | ``s_i(ω) = (Δn_valid − Δn_conflict) / Δn_trigger`` | DESIGN §3.3 |
| :func:`update_h_score` | ``H ← (N·H + Σ s_i) / (N + |I|)``, ``N ← N + |I|`` | seed App. F; DESIGN §3.4 |
| :func:`local_utility` | ``Φ = Rel + (n_valid − n_conflict) / max(1, n_trigger)`` | seed §3.2; DESIGN §3.6 |
| :func:`anomaly_score` | ``A = (1−α)[λ·max(a_int,a_evi) + (1−λ)(a_int+a_evi)/2] + α·a_con`` | seed App. E; DESIGN §3.7 |
| :func:`update_routing_state` | ``C ← (1−η)C + η·g``, ``S ← (1−η)S + η·1[retained]`` | DESIGN §3.8 |
"""

from pfedma_flwr.anomaly.scores import anomaly_score
from pfedma_flwr.routing.state import update_routing_state
from pfedma_flwr.rules.modes import local_utility
from pfedma_flwr.rules.server.promotion import (
    feedback_score,
    promote,
    support_proportions,
    update_h_score,
)

__all__ = [
    "anomaly_score",
    "feedback_score",
    "local_utility",
    "promote",
    "support_proportions",
    "update_h_score",
    "update_routing_state",
]
