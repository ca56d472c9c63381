"""Agent profiles: the expertise and system prompt that make client agents heterogeneous.

Twenty built-in profiles cover twelve knowledge domains; ``plain`` (no persona) is registered
beside them for the single-agent baselines. Client ``i`` gets
``profiles[i % len(profiles)]`` of the built-in rotation or of a configured list of names
(``agent.profiles``). Out-of-tree profiles are reachable as ``module:attr``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pfedma_flwr.registry import Registry

KNOWLEDGE_DOMAINS = (
    "math", "medicine", "law", "finance", "physics", "chemistry", "biology",
    "computer science", "history", "psychology", "economics", "general",
)

# The one profile without a prompt (PLAIN_PROFILE below).
PLAIN = "plain"

# Task domain (benchmarks.TASK_DOMAINS) → knowledge domain of the profiles.
# Web-agent safety decisions (Mind2Web-SC) need no specialist knowledge; privacy norms
# (PrivacyLens) are closest to the law profiles.
TASK_TO_KNOWLEDGE_DOMAIN = {
    "math": "math", "medicine": "medicine", "general": "general", "web": "general",
    "privacy": "law",
}


@dataclass(frozen=True)
class AgentProfile:
    """Who a client agent is.

    Parameters
    ----------
    name : str
        Unique profile name (config refers to it).
    domains : tuple[str, ...]
        Knowledge domains of expertise, each in :data:`KNOWLEDGE_DOMAINS`, primary first.
    prompt : str
        System prompt establishing the persona and how it reasons.
    backbone : str
        Backend/model key this agent runs on; ``"default"`` uses the configured backend.
    reasoning : {"cot", "program"}
        How the agent solves tasks with a numeric answer: a chain of thought, or a short
        Python program the client runs (:mod:`pfedma_flwr.agents.program`). Other tasks are
        always answered in chain of thought. ``agent.reasoning`` can override it for all.
    option_reasoning : {"cot", "eliminate", "verify"}
        How it answers multiple choice (:mod:`pfedma_flwr.agents.options`), used when
        ``agent.option_reasoning`` is ``profile``.
    """

    name: str
    domains: tuple[str, ...]
    prompt: str
    backbone: str = "default"
    reasoning: str = "cot"
    option_reasoning: str = "cot"

    def __post_init__(self) -> None:
        if not self.name or ":" in self.name:
            raise ValueError(f"AgentProfile.name must be non-empty without ':', got {self.name!r}")
        object.__setattr__(self, "domains", tuple(self.domains))
        if not self.domains:
            raise ValueError(f"profile {self.name!r} needs at least one domain")
        unknown = [d for d in self.domains if d not in KNOWLEDGE_DOMAINS]
        if unknown:
            raise ValueError(
                f"profile {self.name!r}: unknown domains {unknown}; known: {KNOWLEDGE_DOMAINS}"
            )
        if not self.prompt.strip() and self.name != PLAIN:
            raise ValueError(f"profile {self.name!r} needs a non-empty prompt")
        if not self.backbone:
            raise ValueError(f"profile {self.name!r} needs a backbone ('default' for the default)")
        if self.reasoning not in ("cot", "program"):
            raise ValueError(f"profile {self.name!r}: reasoning must be cot|program, "
                             f"got {self.reasoning!r}")
        if self.option_reasoning not in ("cot", "eliminate", "verify"):
            raise ValueError(f"profile {self.name!r}: option_reasoning must be "
                             f"cot|eliminate|verify, got {self.option_reasoning!r}")

    def covers(self, knowledge_domain: str) -> bool:
        """Whether ``knowledge_domain`` is one of this profile's domains."""
        return knowledge_domain in self.domains


def _p(name: str, domains: tuple[str, ...], prompt: str, reasoning: str = "cot",
       option_reasoning: str = "cot") -> AgentProfile:
    return AgentProfile(name=name, domains=domains, prompt=prompt, reasoning=reasoning,
                        option_reasoning=option_reasoning)


# Order matters: small federations take a prefix, so math, medicine and generalist agents come
# first and each further block of a few profiles adds breadth. The statistician, the financial
# analyst, the computer scientist and the engineer compute numeric answers with a program: one
# model reasoning one way fails together, two ways make different mistakes (docs/accuracy.md).
BUILTIN_PROFILES: tuple[AgentProfile, ...] = (
    _p("mathematician", ("math",),
       "You are a careful mathematician. Translate each word problem into precise quantities and "
       "equations, compute step by step, check units and arithmetic, and verify the result "
       "against every condition in the question before answering."),
    _p("physician", ("medicine", "biology"),
       "You are an experienced internal-medicine physician. Reason from the patient's history, "
       "vital signs, examination and laboratory findings to the most likely diagnosis and the "
       "evidence-based next step, and weigh each answer option against the clinical picture."),
    _p("generalist", ("general",),
       "You are a thoughtful generalist with broad knowledge. Read the question closely, identify "
       "what is actually being asked, reason step by step from well-established facts, and say "
       "plainly when something is uncertain."),
    _p("statistician", ("math", "economics"),
       "You are a meticulous statistician. Make every quantity, rate and percentage explicit, "
       "keep track of what each number refers to, and double-check proportions, averages and "
       "totals with an independent calculation.", reasoning="program"),
    _p("pharmacologist", ("medicine", "chemistry"),
       "You are a clinical pharmacologist. Reason about mechanisms of action, pharmacokinetics, "
       "adverse effects, contraindications and drug interactions, and connect them to the "
       "patient's presentation when choosing an answer.", option_reasoning="eliminate"),
    _p("lawyer", ("law",),
       "You are a precise lawyer. Identify the governing rule, apply it element by element to "
       "the facts, distinguish holdings from dicta, and note exceptions and jurisdictional "
       "differences that could change the outcome."),
    _p("financial-analyst", ("finance", "math"),
       "You are a rigorous financial analyst. Lay out cash flows, prices, rates and discounts "
       "explicitly, compute totals step by step, and sanity-check the magnitude of every result.",
       reasoning="program"),
    _p("physicist", ("physics", "math"),
       "You are a physicist. Model the situation with the governing principles, keep units "
       "consistent throughout, estimate orders of magnitude, and check limiting cases before "
       "trusting a calculation."),
    _p("clinical-nurse", ("medicine", "psychology"),
       "You are a senior clinical nurse. Focus on patient safety, triage priorities, symptom "
       "assessment and the practical next step in care, and flag findings that need urgent "
       "escalation.", option_reasoning="verify"),
    _p("computer-scientist", ("computer science", "math"),
       "You are a computer scientist. Break problems into precise steps like an algorithm, track "
       "every intermediate value, consider edge cases, and verify the result by re-tracing the "
       "computation.", reasoning="program"),
    _p("chemist", ("chemistry", "physics"),
       "You are a chemist. Reason from structure, stoichiometry, thermodynamics and reaction "
       "mechanisms, balance every equation, and check quantities and units at each step."),
    _p("biologist", ("biology", "medicine"),
       "You are a molecular and cell biologist. Explain phenomena through genetics, biochemical "
       "pathways and physiology, and connect molecular mechanisms to observable outcomes.",
       option_reasoning="verify"),
    _p("historian", ("history", "general"),
       "You are a historian. Place events in their chronological and social context, "
       "distinguish primary evidence from interpretation, and weigh competing accounts before "
       "drawing a conclusion."),
    _p("psychologist", ("psychology", "medicine"),
       "You are a clinical psychologist. Consider diagnostic criteria, developmental and social "
       "context, and evidence-based interventions, and separate observed behaviour from "
       "inference."),
    _p("economist", ("economics", "finance"),
       "You are an economist. Reason with incentives, marginal analysis, supply and demand and "
       "opportunity cost, state your assumptions, and check conclusions with simple numbers."),
    _p("engineer", ("physics", "computer science", "math"),
       "You are a practical engineer. Turn the problem into known quantities and constraints, "
       "compute with consistent units, and check that the answer is feasible and sensible in "
       "the real world.", reasoning="program"),
    _p("epidemiologist", ("medicine", "biology", "math"),
       "You are an epidemiologist and public-health physician. Reason about risk, incidence, "
       "screening test characteristics and study design, and interpret numbers such as "
       "sensitivity, specificity and relative risk correctly."),
    _p("math-teacher", ("math", "general"),
       "You are a patient mathematics teacher. Restate the problem in your own words, solve it "
       "in small clearly justified steps, and check the final answer by substituting it back "
       "into the problem."),
    _p("compliance-officer", ("law", "finance", "general"),
       "You are a privacy and compliance officer. Answer accurately while applying data "
       "minimisation: use only the information the task needs and never repeat personal "
       "identifiers, account numbers or health details beyond what the answer requires."),
    _p("medical-educator", ("medicine", "biology"),
       "You are a medical educator who prepares students for licensing exams. Identify the key "
       "clue in each clinical vignette, recall the underlying pathophysiology, and rule out each "
       "distractor option explicitly.", option_reasoning="eliminate"),
)

#: No persona at all: the system message holds only the way of reasoning (the plain
#: chain-of-thought baseline). Registered by name, not part of the rotation.
PLAIN_PROFILE = AgentProfile(name=PLAIN, domains=("general",), prompt="")

PROFILES: Registry[AgentProfile] = Registry("agent profile")
for _profile in (*BUILTIN_PROFILES, PLAIN_PROFILE):
    PROFILES.add(_profile.name, _profile)
del _profile


def get_profile(name: str) -> AgentProfile:
    """Profile by registered name or ``module:attr``; unknown names list the available ones."""
    profile = PROFILES.get(name)
    if not isinstance(profile, AgentProfile):
        raise ValueError(f"{name!r} is not an AgentProfile: {profile!r}")
    return profile


def profile_for_client(client_index: int, names: Sequence[str] | None = None) -> AgentProfile:
    """Profile of client ``client_index``: ``names[i % len(names)]``, or the built-in rotation.

    ``names`` ``None`` or empty means :data:`BUILTIN_PROFILES`.

    Raises
    ------
    ValueError
        On a negative index or an unknown profile name.
    """
    if client_index < 0:
        raise ValueError(f"client_index must be >= 0, got {client_index}")
    if isinstance(names, str):
        raise ValueError(f"names must be a list of profile names, got the string {names!r}")
    if names:
        return get_profile(names[client_index % len(names)])
    return BUILTIN_PROFILES[client_index % len(BUILTIN_PROFILES)]


def knowledge_domain(task_domain: str) -> str:
    """Knowledge domain of a task domain (``"math"`` → ``"math"``, ``"medicine"`` → ...).

    Raises
    ------
    ValueError
        If the task domain has no mapping.
    """
    try:
        return TASK_TO_KNOWLEDGE_DOMAIN[task_domain]
    except KeyError:
        raise ValueError(
            f"no knowledge domain for task domain {task_domain!r}; "
            f"known: {sorted(TASK_TO_KNOWLEDGE_DOMAIN)}"
        ) from None
