"""Metrics of one finished run (App. H), computed from its output directory.

Everything is read from ``summary.json``, ``queries.jsonl``, ``rounds.jsonl`` and the resolved
``config.yaml``; gold data (sensitive items, violated rules) comes from the benchmark files by
query id. Rates are fractions in ``[0, 1]``; NaN = not measurable in this run.

- ACC (+ ``ACC/<benchmark>``), rounds, tokens and backend calls per query: ``summary.json``;
  ``tokens_per_solved``: all tokens of the run's queries over the number answered correctly;
  ``cost`` and ``cost_per_solved``: the same in USD at ``routing.prices`` (0 without prices).
- FFR, ``orchestrator_tokens``: the LLM orchestrator's format-failure rate and its tokens per
  query (``summary.json`` ``orchestrator.state``; NaN for policies without them).
- LR, LR_wf, LR_adj, helpfulness, helpful, well_formed, LR_string (PrivacyLens): the final
  action of each ``privacylens*`` query (``z``'s answer) judged as PrivacyLens judges it, with
  the run's ``evaluation`` judges (:mod:`pfedma_flwr.experiments.judged`); per round ``LR@t``,
  ``helpfulness@t``.
- WR, LC (AlpacaEval): pairwise judgement of ``z``'s answer against the reference, both
  orders (:mod:`pfedma_flwr.judging.alpacaeval`); AlpacaEval is not part of ACC.
- LPA, LPP, LPR, EA, FRA (Mind2Web-SC, GuardAgent's definitions on the federation's guard
  decision) and ASB's ASR, RR, task success: :mod:`pfedma_flwr.experiments.agent_benchmarks`.
- ASR, RR, exposure and filter rates (adversary ratio > 0): :mod:`pfedma_flwr.experiments.attacks`
  (on ASB tasks the structured ASB metrics of :mod:`~pfedma_flwr.experiments.agent_benchmarks`).
  ``ASR_raw`` counts every query of the run as attacked (``N_atk`` = all instances, since each
  has ``N_adv`` malicious clients); ``exposure`` is the share of queries that selected a
  malicious client at least once; ``det`` / ``fpr`` are the shares of malicious / benign
  responses the anomaly filter removed, among those it scored (an unparsable response never
  reaches the filter, so it is neither a detection nor a false positive). For ``unreliable``
  attacks ASR needs the clean twin run and is filled in by :func:`add_clean_twin_metrics`,
  with BP and PNA (the clean runs with the defences on and off: ASB task success ``TS`` on ASB
  tasks, ACC elsewhere).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from pfedma_flwr.agents import hooks as adv
from pfedma_flwr.config import PFedMAConfig, schema
from pfedma_flwr.data.bench_asb import AsbAttack
from pfedma_flwr.data.benchmarks import Task, load_benchmark
from pfedma_flwr.data.profiles import profile_for_client
from pfedma_flwr.experiments import agent_benchmarks as bench
from pfedma_flwr.experiments import attacks as atk
from pfedma_flwr.experiments import judged
from pfedma_flwr.experiments.metrics import asr, nrp, refusal_rate
from pfedma_flwr.experiments.relocate import relocated_data_dir
from pfedma_flwr.persistence import read_jsonl_lines


@dataclass
class RunData:
    """The outputs of one finished run."""

    out_dir: Path
    cfg: PFedMAConfig
    summary: dict[str, Any]
    queries: list[dict[str, Any]]
    rounds: list[dict[str, Any]] = field(default_factory=list)

    @property
    def num_clients(self) -> int:
        """``N`` (registered clients)."""
        return int(self.summary.get("num_clients", 0))

    def profile_of(self, client_key: str) -> str:
        """Profile name of a client (from the summary if it lists clients, else derived).

        ``summary["clients"][key]["profile_name"]`` when present; otherwise a simulation key
        ``partition-<i>`` maps through ``agent.profiles`` (:func:`profile_for_client`).
        """
        known = self.summary.get("clients", {}).get(client_key)
        if isinstance(known, dict) and known.get("profile_name"):
            return str(known["profile_name"])
        pid = atk.partition_of(client_key)
        if pid is None:
            return client_key
        return profile_for_client(pid, self.cfg.agent.profiles or None).name


def _jsonl(path: Path) -> list[dict[str, Any]]:
    # a torn last line (a crash mid-write) is dropped, as resume does
    return [rec for _, rec in read_jsonl_lines(path)]


def load_run(out_dir: Path) -> RunData:
    """Read a run's output directory (raises ``FileNotFoundError`` without ``summary.json``).

    A run records its benchmark data dir as an absolute path. Where that path is gone (the
    run came from a worktree or another machine), the data dir is resolved again
    (``$PFEDMA_DATA_DIR``, then the shipped data) and accepted only if it holds every gold
    answer the run recorded (:func:`~pfedma_flwr.experiments.relocate.relocated_data_dir`).
    """
    summary = json.loads((out_dir / "summary.json").read_text(encoding="utf-8"))
    merged = OmegaConf.merge(schema(),
                             OmegaConf.load(out_dir / "config.yaml"))
    cfg = OmegaConf.to_object(merged)
    assert isinstance(cfg, PFedMAConfig)
    queries = _jsonl(out_dir / "queries.jsonl")
    recorded = cfg.data.data_dir
    if recorded and not Path(recorded).expanduser().is_dir():
        cfg.data.data_dir = relocated_data_dir(out_dir, recorded, queries)
    return RunData(out_dir=out_dir, cfg=cfg, summary=summary, queries=queries,
                   rounds=_jsonl(out_dir / "rounds.jsonl"))


def _tasks(run: RunData, benchmark: str) -> dict[str, Task]:
    return {t.task_id: t for t in load_benchmark(benchmark, run.cfg.data.data_dir or None)}


def _output(rec: Mapping[str, Any]) -> str:
    return "\n".join(atk.output_texts(rec))




def _z_by_round(run: RunData, benchmark_prefix: str) -> dict[int, dict[str, dict[str, Any]]]:
    """Collaboration round t -> query id -> ``z`` after t, carried forward once finished."""
    per_q: dict[str, dict[int, dict[str, Any]]] = {}
    for rnd in run.rounds:
        for q in rnd.get("queries", []):
            if str(q.get("query_id", "")).startswith(benchmark_prefix):
                per_q.setdefault(str(q["query_id"]), {})[int(q.get("t", 0))] = q.get("z", {})
    t_max = max((t for zs in per_q.values() for t in zs), default=0)
    out: dict[int, dict[str, dict[str, Any]]] = {}
    for t in range(1, t_max + 1):
        for qid, zs in per_q.items():
            done = [k for k in zs if k <= t]
            if done:
                z = zs[max(done)]
                out.setdefault(t, {})[qid] = {"answer": z.get("answer", ""),
                                              "z_claims": z.get("claims", [])}
    return out


def privacy_by_round(run: RunData) -> dict[str, float]:
    """``LR@t`` and ``helpfulness@t`` of ``z`` after round ``t`` (guard: ``guard_by_round``).

    The paper's per-round privacy view: a query that finished earlier keeps its final ``z``.
    """
    out = judged.privacylens_by_round(_z_by_round(run, "privacylens"), run.cfg.evaluation,
                                      run.cfg.data.data_dir)
    return out


def rule_dynamics(run: RunData) -> dict[str, float]:
    """The co-evolution loop at work (issue 12): feedback rows, H moves, promotions, coverage.

    Counts, named ``global_rules/<what>`` (tables show them raw): ``feedback_rows`` Δ-count rows
    the server scored; ``h_moved`` global rules whose ``(H, N)`` changed during the run;
    ``promoted`` rules promoted; ``twins`` query twins added (``P_in`` grown by promotion or
    confirmation); ``active@r`` active global rules after Flower round ``r`` (rule coverage vs
    round).
    """
    rows = promoted = twins = 0
    first: dict[str, list[float]] = {}
    last: dict[str, list[float]] = {}
    out: dict[str, float] = {}
    for rnd in run.rounds:
        ru = rnd.get("rules", {}) or {}
        rows += int((ru.get("feedback") or {}).get("n_rows", 0))
        promoted += int(ru.get("promoted", 0) or 0)
        twins += len((ru.get("update") or {}).get("twins") or ())
        h = ru.get("h_scores") or {}
        for rid, v in h.items():
            first.setdefault(rid, [0.0, 0])
            last[rid] = v
        if h:
            out[f"global_rules/active@{rnd.get('round')}"] = float(
                sum(bool(v[2]) for v in h.values()))
    moved = sum(1 for rid, v in last.items() if list(v[:2]) != list(first[rid][:2]))
    out.update({"global_rules/feedback_rows": float(rows), "global_rules/h_moved": float(moved),
                "global_rules/promoted": float(promoted), "global_rules/twins": float(twins)})
    return out


def _malicious_keys(run: RunData, query_id: str) -> set[str]:
    a = run.cfg.adversary
    ids = adv.malicious_clients(query_id, run.num_clients, a.ratio, a.seed)
    return {f"partition-{i}" for i in ids}


def _injections(run: RunData) -> dict[str, AsbAttack]:
    a = run.cfg.adversary
    pool = adv.attack_pool(a.attacks, run.cfg.data.data_dir)
    return {str(r["query_id"]): adv.choose_attack(str(r["query_id"]), pool, a.seed)
            for r in run.queries}


def attack_outcomes(run: RunData) -> dict[str, tuple[str, bool]]:
    """Query id → (benchmark, the attack succeeded): the per-query terms of an injection ASR.

    On ASB tasks ``z``'s call list calls the attacker tool
    (:func:`~pfedma_flwr.experiments.agent_benchmarks.asb_attack_outcomes`), elsewhere the
    injected output appears in the answer. Empty for clean runs and for ``unreliable`` /
    ``collusion`` attacks, whose per-query success needs the clean twin.
    """
    a = run.cfg.adversary
    if a.ratio == 0.0 or a.kind != "injection" or not run.queries:
        return {}
    bench_of = {str(r["query_id"]): str(r["benchmark"]) for r in run.queries}
    if any(b == "asb" for b in bench_of.values()):
        won = bench.asb_attack_outcomes(run)
    else:
        won = _injection_outcomes(run, _injections(run))
    return {q: (bench_of[q], ok) for q, ok in won.items()}


def _injection_outcomes(run: RunData, attacks: Mapping[str, AsbAttack]) -> dict[str, bool]:
    """Query id → the injected output appears in the answer (non-ASB injection runs)."""
    return {str(r["query_id"]): atk.injection_succeeded(atk.output_texts(r),
                                                        attacks[str(r["query_id"])])
            for r in run.queries}


def robustness(run: RunData) -> dict[str, float]:
    """ASR_raw (injection), RR, exposure, det and fpr of an attacked run (empty if ρ = 0)."""
    a = run.cfg.adversary
    if a.ratio == 0.0 or not run.queries:
        return {}
    out: dict[str, float] = {}
    exposed = []
    for r in run.queries:
        bad = _malicious_keys(run, str(r["query_id"]))
        exposed.append(any(c in bad for sel in r.get("selections", []) for c in sel))
    out["exposure"] = sum(exposed) / len(exposed)
    if a.kind == "injection" and any(r["benchmark"] == "asb" for r in run.queries):
        out.update(bench.asb_robustness(run))
    elif a.kind == "injection":
        attacks = _injections(run)
        out["ASR"] = asr(list(_injection_outcomes(run, attacks).values()))
        aggr = [r for r in run.queries if attacks[str(r["query_id"])].aggressive]
        out["RR"] = refusal_rate([atk.is_refusal(_output(r)) for r in aggr]) if aggr \
            else math.nan
    mal, ben = [0, 0], [0, 0]  # [filtered, total]
    for rnd in run.rounds:
        for q in rnd.get("queries", []):
            bad = _malicious_keys(run, str(q["query_id"]))
            for c, res in q.get("anomaly", {}).items():
                if res.get("reason") == "unparsed":
                    continue
                tally = mal if c in bad else ben
                tally[1] += 1
                tally[0] += not bool(res.get("retained", True))
    out["det"] = mal[0] / mal[1] if mal[1] else math.nan
    out["fpr"] = ben[0] / ben[1] if ben[1] else math.nan
    return out


def run_metrics(run: RunData) -> dict[str, float]:
    """Every metric measurable in ``run`` (module docstring), as fractions."""
    s = run.summary
    m: dict[str, float] = {
        # over gold-scored queries only (null when none: e.g. AlpacaEval alone, judged below)
        "ACC": float(s["accuracy"]) if isinstance(s.get("accuracy"), int | float) else math.nan,
        "rounds": float(s.get("rounds_per_query", math.nan)),
        "tokens": float(s.get("tokens_per_query", math.nan)),
        "calls": float(s.get("backend_calls_per_query", math.nan)),
        # share of those tokens the clients' generation caches served (reused, still counted)
        "cached_share": float(s.get("cached_share", math.nan)),
        # USD per query at routing.prices (0 without prices)
        "cost": float(s.get("cost_per_query", math.nan)),
        "global_rules": float(s.get("rules", {}).get("global_active", 0)),
        "query_rules": sum(int(r.get("query_rules_fired", 0)) for r in run.queries)
        / max(1, len(run.queries)),
    }
    for b, acc in s.get("accuracy_by_benchmark", {}).items():
        m[f"ACC/{b}"] = float(acc)
    # cost of a correct answer: all tokens spent over the queries answered correctly
    solved = sum(bool(r.get("correct")) for r in run.queries)
    spent = sum(float(r.get("tokens", 0)) for r in run.queries)
    m["tokens_per_solved"] = spent / solved if solved else math.nan
    paid = sum(float(r.get("cost", 0.0)) for r in run.queries)
    m["cost_per_solved"] = paid / solved if solved else math.nan
    # the LLM orchestrator's own counters (summary.json "orchestrator"); n/a for other policies
    orch = (s.get("orchestrator") or {}).get("state") or {}
    m["FFR"] = float(orch["format_failure_rate"]) if "format_failure_rate" in orch else math.nan
    m["orchestrator_tokens"] = (float(orch["tokens"]) / max(1, len(run.queries))
                                if "tokens" in orch else math.nan)
    m.update(judged.run_privacylens(run.queries, run.cfg.evaluation, run.cfg.data.data_dir))
    m.update(judged.alpacaeval_metrics(run.queries, run.cfg.evaluation, run.cfg.data.data_dir))
    m.update(bench.guard(run))
    m.update(privacy_by_round(run))
    m.update(bench.guard_by_round(run))
    m.update(bench.asb_task_success(run))
    m.update(rule_dynamics(run))
    m.update(robustness(run))
    return m


def add_clean_twin_metrics(
    rows: Sequence[dict[str, Any]], runs: Mapping[str, RunData], twin_axis: str = "rho",
    undefended: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, dict[str, tuple[str, bool]]]:
    """BP, PNA, NRP (and ASR of ``unreliable``/``collusion`` attacks) from clean twins (App. H).

    The clean twin has the same labels except ``twin_axis`` and adversary ratio 0.
    BP = its ACC, or its ASB task success ``TS`` where it has one (benign tasks, the method's
    defences on; ASB's PNA-d). PNA = the same of the clean run of the same method with its
    defences off: ``undefended`` maps an axis level to that level (e.g.
    ``{"method": {"pfedma": "-all"}}``); a level without one has no defence to switch off, so
    its PNA is its BP; PNA is NaN when the undefended clean run is missing (``--only``).
    NRP = 100·PNA·(1 − ASR) (percent). An ``unreliable`` attack on query ``q`` succeeded when
    the defended clean twin answered ``q`` right and the attacked run did not.

    Returns the per-query terms of those ``unreliable``/``collusion`` ASRs, variant → query id
    → (benchmark, the attack succeeded), for their intervals and paired tests (what
    :func:`attack_outcomes` gives for injections).
    """
    def key(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((k, v) for k, v in labels.items() if k != twin_axis))

    clean = {key(r["labels"]): r for r in rows
             if runs[r["variant"]].cfg.adversary.ratio == 0.0}
    outcomes: dict[str, dict[str, tuple[str, bool]]] = {}
    for r in rows:
        twin = clean.get(key(r["labels"]))
        if twin is None:
            continue
        # benign success: ASB's task success where the run has ASB tasks, else accuracy
        base = "TS" if "TS" in twin["metrics"] else "ACC"
        r["metrics"]["BP"] = twin["metrics"][base]
        off = dict(r["labels"])
        for axis, pairs in (undefended or {}).items():
            if off.get(axis) in pairs:
                off[axis] = pairs[off[axis]]
        # NaN, not BP, when the undefended clean run was not part of this experiment (--only)
        bare = twin if off == r["labels"] else clean.get(key(off))
        r["metrics"]["PNA"] = bare["metrics"][base] if bare is not None else math.nan
        run = runs[r["variant"]]
        if run.cfg.adversary.ratio > 0 and run.cfg.adversary.kind in ("unreliable", "collusion"):
            right = {q["query_id"]: bool(q["correct"]) for q in runs[twin["variant"]].queries}
            won = outcomes[r["variant"]] = {
                str(q["query_id"]): (str(q.get("benchmark", "")), atk.unreliable_attack_succeeded(
                    right.get(q["query_id"], False), bool(q["correct"]))) for q in run.queries}
            r["metrics"]["ASR"] = asr([ok for _, ok in won.values()])
        if run.cfg.adversary.ratio > 0:
            r["metrics"]["NRP"] = nrp(r["metrics"]["PNA"], r["metrics"].get("ASR", math.nan))
    return outcomes


def selection_matrix(run: RunData) -> tuple[list[str], list[str], list[list[float]]]:
    """Profile × benchmark selection frequency: share of a benchmark's selections per profile."""
    counts: dict[tuple[str, str], int] = {}
    totals: dict[str, int] = {}
    for r in run.queries:
        b = str(r["benchmark"])
        for sel in r.get("selections", []):
            for c in sel:
                key = (run.profile_of(c), b)
                counts[key] = counts.get(key, 0) + 1
                totals[b] = totals.get(b, 0) + 1
    profiles = sorted({p for p, _ in counts})
    benches = sorted(totals)
    matrix = [[counts.get((p, b), 0) / totals[b] for b in benches] for p in profiles]
    return profiles, benches, matrix


def capability_matrix(run: RunData) -> tuple[list[str], list[str], list[list[float]]]:
    """Client (``key (profile)``) × knowledge domain capability ``C`` at the end of the run."""
    clients = run.summary.get("routing", {}).get("clients", {})
    domains = sorted({d for st in clients.values() for d in st.get("capability", {})})
    names = [f"{c} ({run.profile_of(c)})" for c in clients]
    matrix = [[float(st.get("capability", {}).get(d, math.nan)) for d in domains]
              for st in clients.values()]
    return names, domains, matrix
