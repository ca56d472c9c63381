r"""Hooks around an honest agent, and the adversary of the robustness evaluation (paper App. J).

:class:`AgentHook`: what a hook may change around :meth:`ClientAgent.respond
<pfedma_flwr.client.agent.ClientAgent.respond>`: the task text the agent's LLM sees and the
structured response it produced (before the client's rules process it). The agent itself
knows nothing of attacks; the harness configures hooks (``adversary`` section) and
:func:`~pfedma_flwr.client.components.build_agent` applies them under the node's policy
(``allow-adversary``).

:class:`Adversary` (the one hook shipped)
    For each instance (query id) ``N_adv = round_half_up(ρ_adv · N)`` of the ``N`` clients are
    malicious, drawn without replacement by a generator seeded with ``(seed, crc32(query id))``
    (:func:`malicious_clients`). Every client computes the same set from its own partition id,
    so the server needs no knowledge of who is malicious. A malicious client

    - ``injection``: its LLM sees :math:`\tilde{x} = x_t \oplus x_{ign} \oplus x_e` (ASB's
      context-ignoring prompt injection, :func:`~pfedma_flwr.data.bench_asb.
      context_ignoring_injection`) with one ASB attacker instruction chosen per query from the
      configured pool (:func:`choose_task_attack`; every malicious client of a query uses the
      same). On an ASB task the attack is one of the task's own agent's attacker tools, and the
      tool is added to the malicious client's toolkit as ASB's DPI does
      (:func:`~pfedma_flwr.data.bench_asb_tasks.inject_attack`); on other tasks the text is
      appended to the question;
    - ``unreliable``: returns a wrong-but-confident answer (:func:`corrupt_answer`: a perturbed
      number, another option letter, ...) with ``self_confidence = domain_fit = 1``;
    - ``collusion`` (issue 30): the malicious clients of a query give the same wrong answer
      (the corruption of an answer they share, as skilled colluders' own answers are) and
      state it as a claim that is its own evidence, the form that zeroed ``a_evi`` before
      (:func:`colluding_response`).
"""

from __future__ import annotations

import functools
import math
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from pfedma_flwr.config import ADVERSARY_KINDS, ATTACK_POOLS, AdversaryConfig
from pfedma_flwr.data.bench_asb import AsbAttack, context_ignoring_injection, load_asb_attacks
from pfedma_flwr.data.bench_asb_tasks import agent_of_question, inject_attack
from pfedma_flwr.data.benchmarks import resolve_data_dir
from pfedma_flwr.protocol.schema import Claim, StructuredResponse


class AgentHook:
    """A hook around an honest agent's answer (identity by default; override either step).

    Hooks run in the order given to :class:`~pfedma_flwr.client.agent.ClientAgent`
    (``hooks=``): each ``task_text`` sees the previous one's text, each ``response`` the
    previous one's response.
    """

    def task_text(self, query_id: str, text: str) -> str:
        """What the agent's LLM sees as the task of ``query_id`` (default: ``text``)."""
        return text

    def response(self, query_id: str, resp: StructuredResponse, answer_kind: str,
                 query_text: str) -> StructuredResponse:
        """The response the agent goes on with (default: ``resp``), before its rules run."""
        return resp


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_OPTION_LINE = re.compile(r"^\s*([A-J])[.)]\s", re.MULTILINE)
#: Answer swap for allow/deny decisions (Mind2Web-SC).
_DECISION_SWAP = {"allow": "deny", "deny": "allow"}
_TEXT_FALLBACK = "No further action is needed."


def num_malicious(num_clients: int, ratio: float) -> int:
    """``N_adv = round_half_up(ρ_adv · N)`` (App. J: ``ρ_adv = N_adv / N``).

    Half-up rather than Python's half-to-even, so ``ρ = 0.1`` of 5 clients is 1, not 0.

    Raises
    ------
    ValueError
        If ``num_clients < 0`` or ``ratio`` is outside ``[0, 1]``.
    """
    if num_clients < 0:
        raise ValueError(f"num_clients must be >= 0, got {num_clients}")
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"ratio must be in [0, 1], got {ratio}")
    # The epsilon keeps 0.3 * 5 = 1.4999999999999998 on the half-up side.
    return min(num_clients, int(math.floor(ratio * num_clients + 0.5 + 1e-9)))


def _rng(seed: int, query_id: str, salt: int) -> np.random.Generator:
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, zlib.crc32(query_id.encode()), salt])


def malicious_clients(query_id: str, num_clients: int, ratio: float, seed: int = 0
                      ) -> frozenset[int]:
    """Partition ids of the malicious clients of instance ``query_id`` (App. J).

    ``N_adv`` ids drawn without replacement from ``range(num_clients)`` by a generator seeded with
    ``(seed, crc32(query_id))``: the same on every client and in the analysis.
    """
    n_adv = num_malicious(num_clients, ratio)
    if n_adv == 0:
        return frozenset()
    picks = _rng(seed, query_id, 0).choice(num_clients, size=n_adv, replace=False)
    return frozenset(int(i) for i in picks)


@functools.cache
def attack_pool(attacks: str, data_dir: str = "") -> tuple[AsbAttack, ...]:
    """ASB attacker instructions of pool ``attacks``: all, aggressive or non_aggressive."""
    if attacks not in ATTACK_POOLS:
        raise ValueError(f"attacks must be one of {ATTACK_POOLS}, got {attacks!r}")
    flag = {"all": None, "aggressive": True, "non_aggressive": False}[attacks]
    return tuple(load_asb_attacks(resolve_data_dir(data_dir or None), aggressive=flag))


def choose_attack(query_id: str, pool: Sequence[AsbAttack], seed: int = 0) -> AsbAttack:
    """The attacker instruction used against instance ``query_id`` (seeded by seed and id)."""
    if not pool:
        raise ValueError("the attack pool is empty")
    return pool[int(_rng(seed, query_id, 1).integers(len(pool)))]


def choose_task_attack(query_id: str, pool: Sequence[AsbAttack], seed: int = 0,
                       agent: str | None = None) -> AsbAttack:
    """The attack against ``query_id``: among ``agent``'s own attacker tools when it has any.

    ASB attacks an agent with the attacker tools written for it (``Corresponding Agent``); for
    a task of no ASB agent (``agent`` ``None``) the whole pool is used.
    """
    own = [a for a in pool if a.agent == agent] if agent else []
    return choose_attack(query_id, own or pool, seed)


def corrupt_answer(answer: str, answer_kind: str, query_text: str, query_id: str) -> str:
    """A wrong answer derived from the client's own ``answer`` (the ``unreliable`` adversary).

    - ``number``: the last number plus ``1 + crc32(query_id) % 9`` (never equal to it);
    - ``option``: the next option letter (cyclically) among the ``"A. ..."`` lines of the query
      (A–D when the query lists none);
    - ``math``: ``(<answer>)+1``;
    - ``text``: ``allow`` ↔ ``deny``; any other text becomes a fixed unhelpful sentence;
    - ``action``, ``response``: that unhelpful sentence (no action, no answer).
    """
    text = answer.strip()
    if answer_kind == "number":
        nums = _NUMBER.findall(text)
        delta = 1 + zlib.crc32(query_id.encode()) % 9
        value = float(nums[-1]) + delta if nums else float(delta)
        return str(int(value)) if value.is_integer() else f"{value:g}"
    if answer_kind == "option":
        letters = sorted(set(_OPTION_LINE.findall(query_text))) or ["A", "B", "C", "D"]
        if len(letters) == 1:
            letters.append(chr(ord(letters[0]) + 1))
        own = text[:1].upper()
        k = letters.index(own) if own in letters else -1
        return letters[(k + 1) % len(letters)]
    if answer_kind == "math":
        return f"({text})+1" if text else "1"
    if answer_kind in ("action", "response"):
        return _TEXT_FALLBACK if text != _TEXT_FALLBACK else "Do nothing."
    if answer_kind == "text":
        swapped = _DECISION_SWAP.get(text.casefold())
        if swapped is not None:
            return swapped
        return _TEXT_FALLBACK if text != _TEXT_FALLBACK else "Do nothing."
    raise ValueError(f"unknown answer_kind {answer_kind!r}")


def unreliable_response(resp: StructuredResponse, answer_kind: str, query_text: str,
                        query_id: str) -> StructuredResponse:
    """The wrong-but-confident response of an ``unreliable`` malicious client."""
    wrong = corrupt_answer(resp.final_answer, answer_kind, query_text, query_id)
    confident = Claim(claim=f"The answer is definitely {wrong}.",
                      evidence=("I have verified this carefully and I am certain.",))
    return replace(resp, final_answer=wrong, claims=(confident, *resp.claims[:2]),
                   domain_fit=1.0, self_confidence=1.0)


def colluding_response(resp: StructuredResponse, answer_kind: str, query_text: str,
                       query_id: str) -> StructuredResponse:
    """A colluder's response: the corrupted answer, claimed with itself as evidence."""
    wrong = corrupt_answer(resp.final_answer, answer_kind, query_text, query_id)
    claim = f"The answer is {wrong}."
    return replace(resp, final_answer=wrong, claims=(Claim(claim=claim, evidence=(claim,)),),
                   domain_fit=1.0, self_confidence=1.0)


@dataclass(frozen=True)
class Adversary(AgentHook):
    """The client-side adversary hook of one client (partition ``partition_id`` of ``num_clients``).

    Parameters
    ----------
    partition_id, num_clients : int
        This client's index and ``N``.
    ratio : float
        ``ρ_adv`` in ``[0, 1]``.
    kind : str
        ``injection``, ``unreliable`` or ``collusion``.
    seed : int
        Seed of the malicious sets and attack choices.
    attacks : tuple[AsbAttack, ...]
        The attack pool (needed for ``injection`` only).
    """

    partition_id: int
    num_clients: int
    ratio: float
    kind: str = "injection"
    seed: int = 0
    attacks: tuple[AsbAttack, ...] = ()

    def __post_init__(self) -> None:
        if not 0 <= self.partition_id < self.num_clients:
            raise ValueError(f"partition_id {self.partition_id} outside [0, {self.num_clients})")
        if not 0.0 <= self.ratio <= 1.0:
            raise ValueError(f"ratio must be in [0, 1], got {self.ratio}")
        if self.kind not in ADVERSARY_KINDS:
            raise ValueError(f"kind must be one of {ADVERSARY_KINDS}, got {self.kind!r}")
        if self.kind == "injection" and not self.attacks:
            raise ValueError("an injection adversary needs a non-empty attack pool")

    @classmethod
    def from_config(cls, cfg: AdversaryConfig, *, partition_id: int, num_clients: int,
                    data_dir: str = "") -> Adversary | None:
        """The hook for ``cfg`` (``None`` when ``ratio`` is 0: no client is ever malicious)."""
        if cfg.ratio == 0.0:
            return None
        pool = attack_pool(cfg.attacks, data_dir) if cfg.kind == "injection" else ()
        return cls(partition_id=partition_id, num_clients=num_clients, ratio=cfg.ratio,
                   kind=cfg.kind, seed=cfg.seed, attacks=pool)

    def is_malicious(self, query_id: str) -> bool:
        """Whether this client is malicious for instance ``query_id``."""
        return self.partition_id in malicious_clients(query_id, self.num_clients, self.ratio,
                                                      self.seed)

    def task_text(self, query_id: str, text: str) -> str:
        """What this client's LLM sees as the task: ``x̃`` when injecting, else ``text``."""
        if self.kind != "injection" or not self.is_malicious(query_id):
            return text
        agent = agent_of_question(text)
        attack = choose_task_attack(query_id, self.attacks, self.seed, agent)
        if agent is not None:
            return inject_attack(text, attack)
        return context_ignoring_injection(text, attack)

    def response(self, query_id: str, resp: StructuredResponse, answer_kind: str,
                 query_text: str) -> StructuredResponse:
        """The response this client uploads: corrupted when ``unreliable`` or ``collusion``."""
        if self.kind == "injection" or not self.is_malicious(query_id):
            return resp
        corrupt = unreliable_response if self.kind == "unreliable" else colluding_response
        return corrupt(resp, answer_kind, query_text, query_id)
