"""The server's global rule repository ``Ω_global``: H-score feedback, promotion and Resolve.

DESIGN §3.1–3.5, seed App. F. ``RuleUpdate`` = :meth:`GlobalRuleRepository.apply_feedback`
(H-scores from ``F^t``) followed by :meth:`GlobalRuleRepository.update` (promote ``G^t`` from the
pool and :func:`~.resolve.resolve` the union). The pure formulas live in :mod:`.promotion`,
:mod:`.feedback` and :mod:`.resolve`, new rules with their ids and the round-log reports in
:mod:`.global_update`. Hostile clients bound what they can add: promotions are capped per
round and per contributor (:func:`admit`), the repository and the redistributed snapshot are
capped, and a rule that fails at run time is quarantined.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pfedma_flwr.embeddings import Embedder
from pfedma_flwr.protocol.schema import GlobalRule, RuleFeedback
from pfedma_flwr.rules.constants import SIM_THRESHOLD
from pfedma_flwr.rules.normalize import text_key
from pfedma_flwr.rules.server.feedback import SERVER_RATER, Electorate, client_scores, server_scores
from pfedma_flwr.rules.server.global_update import (
    FeedbackReport,
    UpdateReport,
    commit,
    confirmed,
    load_rules,
    new_twins,
    promoted_rules,
    seed_rules,
    spec_key,
)
from pfedma_flwr.rules.server.promotion import (
    CandidatePool,
    SimilarityStats,
    admit,
    owner_support,
    promote_supported,
    update_h_score,
)
from pfedma_flwr.rules.server.resolve import ResolveResult, resolve

logger = logging.getLogger(__name__)

REPO_VERSION = 1


# --------------------------------------------------------------------------- repository


class GlobalRuleRepository:
    """``Ω_global`` with H-scores, evaluation counts and one active rule per constraint.

    Parameters
    ----------
    embedder : Embedder
        Encodes rule texts (each text once; embeddings are kept with the rules).
    sim_threshold : float
        Cosine at or above which two rules address the same constraint (seed: 0.9).
    id_prefix : str
        Prefix of assigned rule ids (``<prefix><n>``).
    max_promotions_per_round, max_promotions_per_client : int
        New rules admitted per round, and per contributor per round (measured attack: two
        colluding clients x 256 candidates x 3 rounds made 768 active rules).
    max_rules : int
        Size of the repository; once full, nothing new is admitted (nothing is evicted:
        DESIGN §3.5).
    snapshot_size : int
        Rules redistributed per message (:meth:`snapshot`: highest H first, then oldest).
    twins : bool
        Whether a promoted or feedback-confirmed response rule also adds its ``P_in`` twin
        (:func:`~pfedma_flwr.rules.server.global_update.new_twins`).
    min_support_clients, min_support_share : int, float
        Distinct clients (and share of the round's uploaders) a candidate needs to be promoted
        (:func:`~pfedma_flwr.rules.server.promotion.promote_supported`), and distinct raters (and
        share of the clients that held the rule) before its H may rank it in Resolve
        (:func:`~pfedma_flwr.rules.server.feedback.credible`). ``1`` and ``0.0``: the seed's rules
        (a singleton pool promotes, any rating counts).
    """

    def __init__(
        self, *, embedder: Embedder, sim_threshold: float = SIM_THRESHOLD, id_prefix: str = "g",
        max_promotions_per_round: int = 4, max_promotions_per_client: int = 1,
        max_rules: int = 1024, snapshot_size: int = 64, twins: bool = False,
        min_support_clients: int = 2, min_support_share: float = 0.5,
    ) -> None:
        if not -1.0 <= sim_threshold <= 1.0:
            raise ValueError(f"sim_threshold must be in [-1, 1], got {sim_threshold}")
        if not id_prefix or ":" in id_prefix:
            raise ValueError(f"id_prefix must be non-empty without ':', got {id_prefix!r}")
        caps = {"max_promotions_per_round": max_promotions_per_round,
                "max_promotions_per_client": max_promotions_per_client,
                "max_rules": max_rules, "snapshot_size": snapshot_size}
        for name, v in caps.items():
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        #: holders and raters of each rule (who may rate it, whose ratings may rank it)
        self.electorate = Electorate(min_clients=min_support_clients,
                                     min_share=min_support_share)
        self.embedder = embedder
        self.sim_threshold = float(sim_threshold)
        self.id_prefix = id_prefix
        self.max_promotions_per_round = max_promotions_per_round
        self.max_promotions_per_client = max_promotions_per_client
        self.max_rules, self.snapshot_size = max_rules, snapshot_size
        self.twins = bool(twins)
        self._rules: list[GlobalRule] = []  # age order
        self._emb = np.zeros((0, embedder.dim), dtype=np.float32)
        self._aliases: dict[str, str] = {}  # merged-away id -> surviving id
        self._quarantined: dict[str, str] = {}  # rule id -> reason code
        self._next_id = 0
        self.last_pool_similarity = SimilarityStats(n=0)

    def summary(self) -> None:
        """Log the configuration and contents."""
        logger.info(
            "GlobalRuleRepository\n\t├──> sim_threshold: %s\n\t├──> rules: %d (%d active)"
            "\n\t└──> embedder: %s",
            self.sim_threshold, len(self._rules), len(self.active_rules()),
            type(self.embedder).__name__,
        )

    def __len__(self) -> int:
        return len(self._rules)

    def rules(self) -> list[GlobalRule]:
        """Every rule (active and inactive alternatives), oldest first."""
        return list(self._rules)

    def active_rules(self) -> list[GlobalRule]:
        """The active rule of each constraint, oldest first."""
        return [r for r in self._rules if r.active]

    def snapshot(self) -> list[GlobalRule]:
        """The active rules to redistribute: at most ``snapshot_size``, highest H, then oldest."""
        order = sorted(range(len(self._rules)), key=lambda k: (-self._rules[k].h_score, k))
        return [self._rules[k] for k in order if self._rules[k].active][: self.snapshot_size]

    @property
    def quarantined(self) -> dict[str, str]:
        """Rule id -> reason code of every rule taken out of service."""
        return dict(self._quarantined)

    def is_quarantined(self, rule_id: str) -> bool:
        """Whether ``rule_id`` was taken out of service."""
        return rule_id in self._quarantined

    def quarantine(self, rule_id: str, reason: str) -> None:
        """Take a rule that failed at run time out of the repository (logged, never raised).

        It leaves the rules, the snapshot and every later checkpoint; its id and the reason code
        stay in :attr:`quarantined`, so feedback for it is reported as unknown.
        """
        rid = self._aliases.get(rule_id, rule_id)
        self._quarantined[rid] = str(reason)[:40]
        keep = [k for k, r in enumerate(self._rules) if r.rule_id != rid]
        if len(keep) < len(self._rules):
            logger.warning("global rule %r quarantined (%s)", rid, reason)
            self._rules = [self._rules[k] for k in keep]
            self._emb = self._emb[keep]

    # ------------------------------------------------------------------ feedback (§3.3–3.4)

    def apply_feedback(
        self, feedback_by_client: Mapping[str, Sequence[RuleFeedback]], *,
        check_held: bool = False, max_triggers: Mapping[str, int] | None = None,
    ) -> FeedbackReport:
        """Update H-scores from ``F^t`` (DESIGN §3.3–3.4, :mod:`.feedback`).

        Each client counts once per rule: its rows for one id (after merge aliases) are summed
        before scoring. Rows with ``Δn_trigger = 0`` are not evaluable and are ignored, rows for
        query-scope rules too (the server rates those, :meth:`apply_server_feedback`); with
        ``check_held`` only rules sent to the client count, and with ``max_triggers`` a summed
        trigger count above the client's responses is not believed. Unknown ids are reported,
        not fatal. Rules without evaluable feedback keep ``(H, N)``.
        """
        index = {r.rule_id: k for k, r in enumerate(self._rules)}
        tally = client_scores(
            feedback_by_client,
            resolve_id=lambda rid: (lambda a: a if a in index else None)(
                self._aliases.get(rid, rid)),
            scope_of=lambda rid: self._rules[index[rid]].scope,
            held=self.electorate.holds if check_held else None, max_triggers=max_triggers)
        for rid, scored in tally.scores.items():
            self._score(index[rid], [s for _, s in scored], [c for c, _ in scored])
        if tally.unknown:
            logger.warning("feedback for %d unknown global rule id(s) ignored", len(tally.unknown))
        return FeedbackReport.of(tally, n_clients=len(feedback_by_client))

    def apply_server_feedback(self, fired: Mapping[str, int]) -> list[str]:
        """H-scores of the query rules ``P_in`` applied this round (the server rates them)."""
        index = {r.rule_id: k for k, r in enumerate(self._rules)}
        ids = {self._aliases.get(rid, rid): n for rid, n in fired.items()}
        scores = server_scores(ids, [r for r in index if self._rules[index[r]].scope == "query"])
        for rid, s in scores.items():
            self._score(index[rid], s, [SERVER_RATER])
        return sorted(scores)

    def _score(self, k: int, scores: Sequence[float], raters: Sequence[str]) -> None:
        rule = self._rules[k]
        h, n = update_h_score(rule.h_score, rule.n_evals, scores)
        self._rules[k] = dataclasses.replace(rule, h_score=h, n_evals=n)
        self.electorate.rated(rule.rule_id, raters)

    # ------------------------------------------------------------------ promotion + Resolve

    def update(self, server_round: int, pool: CandidatePool) -> UpdateReport:
        """Promote ``G^t`` from ``pool`` (§3.2) and ``Resolve`` the repository (§3.5).

        New rules start at ``H = 0, N = 0``; a promoted candidate equivalent to an existing rule
        merges into it (no new id). With ``twins``, promoted rules and response rules that
        feedback confirmed (:func:`~pfedma_flwr.rules.server.global_update.confirmed`) add their
        ``P_in`` twins. Nothing is removed; only active flags change.
        """
        chosen, refused, zeta, pool_emb = self._promote(server_round, pool)

        n_old = len(self._rules)
        new_rules = promoted_rules([pool.candidates[i] for i in chosen], server_round)
        # Promotion (L2G) and feedback (full: adopted rules leave nothing uncovered to upload)
        # both show a response rule holds across clients; P_in then gets its twin.
        trusted = [r for r in self._rules if self.electorate.credible(r.rule_id)]
        twins = new_twins(new_rules + confirmed(trusted), self._rules) if self.twins else []
        rows = self._rules + new_rules + twins
        emb = np.vstack([self._emb, pool_emb[chosen]]) if chosen else self._emb
        if twins:
            emb = np.vstack([emb, np.asarray(self.embedder.encode([t.text for t in twins]),
                                             dtype=np.float32)])
        res = resolve(
            emb,
            [spec_key(r) for r in rows],
            [r.h_score for r in rows],
            [r.n_evals for r in rows],
            threshold=self.sim_threshold,
            groups=[r.scope for r in rows],
            credible=[self.electorate.credible(r.rule_id) if r.rule_id else False
                      for r in rows],
        )

        was_active = {r.rule_id for r in self._rules if r.active}
        kept, added, twin_ids = self._commit(rows, res, n_old, n_old + len(new_rules))
        self._emb = emb[res.representatives]
        now_active = {r.rule_id for r in kept if r.active}
        report = UpdateReport(
            server_round=server_round,
            pool_size=len(pool),
            zeta_max=float(zeta.max()) if len(zeta) else 0.0,
            promoted=len(chosen),
            added=tuple(added),
            merged=len(rows) - len(kept),
            n_rules=len(kept),
            n_active=len(now_active),
            n_clusters=len(set(res.cluster.tolist())),
            activated=tuple(sorted(now_active - was_active)),
            deactivated=tuple(sorted(was_active - now_active)),
            pool_similarity=self.last_pool_similarity,
            refused=refused,
            twins=tuple(twin_ids),
        )
        logger.debug("rule update %s", report)
        return report

    def _promote(self, server_round: int, pool: CandidatePool
                 ) -> tuple[list[int], dict[str, int], np.ndarray, np.ndarray]:
        """``G^t``: the pool's candidates admitted this round (§3.2, issue 30's support rule).

        Returns the chosen pool indices, what was refused and why, ``ζ`` and the pool's
        embeddings.
        """
        if pool.embeddings.shape[1] != self._emb.shape[1]:
            raise ValueError(
                f"pool embedding dim {pool.embeddings.shape[1]} != "
                f"embedder dim {self._emb.shape[1]}"
            )
        pool_emb = np.asarray(pool.embeddings, dtype=np.float32)
        pool_sims = pool_emb @ pool_emb.T  # the pool's one similarity matrix: ζ and the stats
        # ζ over distinct contributors: a client's candidates count once however worded
        supporters = owner_support(pool_sims, pool.owners, self.sim_threshold)
        zeta = supporters / max(1, len(set(pool.owners)) - 1)
        chosen, refused = admit(
            promote_supported(zeta, supporters, len(set(pool.owners)),
                              min_clients=self.electorate.min_clients,
                              min_share=self.electorate.min_share),
            pool, {(text_key(r.text), spec_key(r)) for r in self._rules},
            room=self.max_rules - len(self._rules), per_round=self.max_promotions_per_round,
            per_client=self.max_promotions_per_client)
        if refused:
            logger.warning("round %d: promotion refused %s", server_round, refused)
        self.last_pool_similarity = SimilarityStats.of(pool_sims)
        return chosen, refused, zeta, pool_emb

    def _commit(self, rows: list[GlobalRule], res: ResolveResult, n_old: int,
                n_promoted_rows: int
                ) -> tuple[list[GlobalRule], list[str], list[str]]:
        """Store Resolve's outcome (:func:`~.global_update.commit`): rules, ids and aliases.

        An old rule merged into an older equivalent becomes its alias, and its holders and
        raters become the survivor's. Returns the kept rules and the ids of the added rules and
        twins.
        """
        done = commit(rows, res, n_old, n_promoted_rows, id_prefix=self.id_prefix,
                      next_id=self._next_id)
        for old, into in done.merged:
            self._aliases[old] = into
            self.electorate.merge(old, into)
        self._aliases = {a: self._aliases.get(b, b) for a, b in self._aliases.items()}
        self._rules, self._next_id = done.rules, done.next_id
        return done.rules, done.added, done.twins

    def seed(self, rules: Sequence[GlobalRule]) -> list[str]:
        """Add the server's initial policy (active, ``H = N = 0``, round 0); returns new ids.

        Ids are re-assigned from this repository's counter; a rule equivalent (same text and
        spec) to a stored one is skipped, so seeding a resumed repository adds nothing.
        """
        new: list[GlobalRule] = []
        for g in seed_rules(rules, self._rules, room=self.max_rules - len(self._rules)):
            self._next_id += 1
            new.append(dataclasses.replace(g, rule_id=f"{self.id_prefix}{self._next_id}",
                                           h_score=0.0, n_evals=0, active=True, created_round=0))
        if new:
            emb = np.asarray(self.embedder.encode([r.text for r in new]), dtype=np.float32)
            self._rules.extend(new)
            self._emb = np.vstack([self._emb, emb])
        return [r.rule_id for r in new]

    # ------------------------------------------------------------------ persistence

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready checkpoint (embeddings are recomputed on load; no quarantined rule)."""
        return {
            "version": REPO_VERSION,
            "sim_threshold": self.sim_threshold,
            "id_prefix": self.id_prefix,
            "next_id": self._next_id,
            "aliases": dict(self._aliases),
            "caps": {"max_promotions_per_round": self.max_promotions_per_round,
                     "max_promotions_per_client": self.max_promotions_per_client,
                     "max_rules": self.max_rules, "snapshot_size": self.snapshot_size},
            "electorate": self.electorate.to_dict(),
            "quarantined": dict(self._quarantined),
            "twins": self.twins,
            "rules": [r.to_dict() for r in self._rules],
        }

    @classmethod
    def from_dict(cls, d: Any, *, embedder: Embedder) -> GlobalRuleRepository:
        """Inverse of :meth:`to_dict`; ``ValueError`` on a malformed or other-version payload.

        A rule entry that is malformed or whose detectors fail
        :func:`~pfedma_flwr.rules.model.check_detectors` (an older run, an edited file) is
        quarantined, not loaded, so resuming survives it.
        """
        if not isinstance(d, dict) or d.get("version") != REPO_VERSION:
            got = d.get("version") if isinstance(d, dict) else type(d).__name__
            raise ValueError(
                f"global rule repository payload: expected version {REPO_VERSION}, got {got!r}"
            )
        try:
            caps = {str(k): int(v) for k, v in dict(d.get("caps", {})).items()}
            repo = cls(embedder=embedder, sim_threshold=float(d["sim_threshold"]),
                       id_prefix=d["id_prefix"], twins=bool(d.get("twins", False)), **caps)
            if "electorate" in d:  # a checkpoint of an older version has none
                repo.electorate = Electorate.from_dict(d["electorate"])
            repo._next_id = int(d["next_id"])
            repo._aliases = {str(a): str(b) for a, b in dict(d["aliases"]).items()}
            repo._quarantined = {str(a): str(b)[:40]
                                 for a, b in dict(d.get("quarantined", {})).items()}
            entries = list(d["rules"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"global rule repository payload is malformed: {e!r}") from None
        rules = load_rules(entries, repo._quarantined)
        repo._rules = rules
        if rules:
            repo._emb = np.asarray(embedder.encode([r.text for r in rules]), dtype=np.float32)
        return repo
