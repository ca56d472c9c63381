"""Historical routing state ``M_i``: capability ``C_{i,d}`` and reliability ``S_i`` (DESIGN §3.8).

``g_i = (1 − A_i)·sim(answer_i, z.answer)`` if retained else 0;
``C_{i,d} ← (1 − η)·C_{i,d} + η·g_i`` for the query's domain ``d``;
``S_i ← (1 − η)·S_i + η·1[retained]``; priors ``C = S = 0.5``. No ground truth is used.

A selected client that fails, times out or sends an unusable reply counts as not retained:
``S`` decays toward 0 (unavailability is unreliability for routing) while ``C_{i,d}`` is left
unchanged, since nothing was learned about its capability on the domain.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

PRIOR = 0.5


def _check_unit(name: str, v: float) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {v!r}")
    if not 0.0 <= v <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {v}")
    return float(v)


def update_routing_state(
    c: float, s: float, quality: float, retained: bool, eta: float = 0.2
) -> tuple[float, float]:
    """One exponential-moving-average step of ``(C_{i,d}, S_i)`` (DESIGN §3.8).

    Parameters
    ----------
    c, s : float
        Current capability on the query's domain and reliability, in [0, 1].
    quality : float
        Quality signal ``g_i`` in [0, 1] (see :func:`quality_signal`).
    retained : bool
        Whether the response passed the anomaly filter.
    eta : float
        Step size ``η`` in (0, 1].

    Returns
    -------
    tuple[float, float]
        ``((1 − η)·c + η·quality, (1 − η)·s + η·1[retained])``.
    """
    c, s, quality = _check_unit("c", c), _check_unit("s", s), _check_unit("quality", quality)
    if not 0.0 < eta <= 1.0:
        raise ValueError(f"eta must be in (0, 1], got {eta}")
    return (1.0 - eta) * c + eta * quality, (1.0 - eta) * s + eta * (1.0 if retained else 0.0)


def quality_signal(anomaly: float, sim_to_z: float, retained: bool) -> float:
    """``g_i = (1 − A_i)·sim(answer_i, z.answer)`` for a retained response, else 0 (§3.8)."""
    if not retained:
        return 0.0
    return (1.0 - _check_unit("anomaly", anomaly)) * _check_unit("sim_to_z", sim_to_z)


@dataclass
class RoutingState:
    """Routing state of one client: ``C`` per domain, ``S``, and asks per domain."""

    capability: dict[str, float] = field(default_factory=dict)
    reliability: float = PRIOR
    n_asked: dict[str, int] = field(default_factory=dict)

    def c(self, domain: str) -> float:
        """``C_{i,d}``, the prior 0.5 for a domain never asked."""
        return self.capability.get(domain, PRIOR)

    def asked(self, domain: str) -> int:
        """Times this client was asked for ``domain``."""
        return self.n_asked.get(domain, 0)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (for checkpoints and for the orchestrator's view)."""
        return {
            "capability": dict(self.capability),
            "reliability": self.reliability,
            "n_asked": dict(self.n_asked),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RoutingState:
        """Inverse of :meth:`to_dict`, validating every value."""
        cap = d.get("capability", {})
        asked = d.get("n_asked", {})
        if not isinstance(cap, Mapping) or not isinstance(asked, Mapping):
            raise ValueError("routing state: capability and n_asked must be mappings")
        for dom, n in asked.items():
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise ValueError(f"routing state: n_asked[{dom!r}] must be an int >= 0, got {n!r}")
        return cls(
            capability={str(k): _check_unit(f"capability[{k!r}]", v) for k, v in cap.items()},
            reliability=_check_unit("reliability", d.get("reliability", PRIOR)),
            n_asked={str(k): int(v) for k, v in asked.items()},
        )


class RoutingTable:
    """Routing states of all clients, keyed by client id; unseen clients start at the priors.

    Parameters
    ----------
    eta : float
        EMA step size ``η`` (config ``routing.eta``).
    """

    def __init__(self, *, eta: float = 0.2) -> None:
        if not 0.0 < eta <= 1.0:
            raise ValueError(f"RoutingTable eta must be in (0, 1], got {eta}")
        self.eta = eta
        self._states: dict[str, RoutingState] = {}

    def get(self, client_id: str) -> RoutingState:
        """State of ``client_id`` (created at the priors on first use)."""
        if not client_id:
            raise ValueError("client_id must be non-empty")
        return self._states.setdefault(client_id, RoutingState())

    def __contains__(self, client_id: object) -> bool:
        return client_id in self._states

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._states))

    def __len__(self) -> int:
        return len(self._states)

    def record(
        self, client_id: str, domain: str, *, anomaly: float, sim_to_z: float, retained: bool
    ) -> RoutingState:
        """Apply §3.8 for one evaluated response of ``client_id`` to a query of ``domain``."""
        return self.record_round(client_id, domain,
                                 qualities=[quality_signal(anomaly, sim_to_z, retained)],
                                 retained=[retained])

    def record_round(
        self, client_id: str, domain: str, *, qualities: list[float], retained: list[bool]
    ) -> RoutingState:
        """One EMA step per (client, domain) and Flower round, over all its answers of the round.

        A Flower round carries many queries; stepping the EMA once per answered query let the
        batch size decide how fast C and S move (a client with 10 queries of one round moved
        10 steps, one with 1 query one step). Here the round's mean quality signal moves
        ``C_{i,d}`` one step and the round's retention share moves ``S_i`` one step (DESIGN §3.8
        revision). ``qualities`` holds ``g_i`` of the answers that had a reference to compare
        with (none: ``C`` is kept); ``retained`` one flag per answer, a failure being ``False``.
        """
        st = self.get(client_id)
        if qualities:
            st.capability[domain], _ = update_routing_state(
                st.c(domain), st.reliability, sum(qualities) / len(qualities), False, self.eta)
        if retained:
            share = sum(retained) / len(retained)
            st.reliability = (1.0 - self.eta) * st.reliability + self.eta * share
        st.n_asked[domain] = st.asked(domain) + len(retained)
        return st

    def record_failure(self, client_id: str, domain: str) -> RoutingState:
        """Selected client failed, timed out or sent nothing usable: ``S`` decays, ``C`` is kept."""
        return self.record_round(client_id, domain, qualities=[], retained=[False])

    def to_dict(self) -> dict[str, Any]:
        """Checkpoint form: ``{"eta": η, "clients": {id: state}}``."""
        return {"eta": self.eta, "clients": {k: self._states[k].to_dict() for k in self}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RoutingTable:
        """Restore a checkpoint written by :meth:`to_dict`."""
        clients = d.get("clients", {})
        if not isinstance(clients, Mapping):
            raise ValueError("routing table: 'clients' must be a mapping")
        table = cls(eta=float(d.get("eta", 0.2)))
        for cid, st in clients.items():
            if not isinstance(st, Mapping):
                raise ValueError(f"routing table: state of {cid!r} must be a mapping")
            table._states[str(cid)] = RoutingState.from_dict(st)
        return table
