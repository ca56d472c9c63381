"""Speculative decoding on 2 CPU cores: is it faster at identical greedy outputs? (one run)

    python3 bench/bench_decoding.py [--n 8] [--max-tokens 256] [--threads 2] [--k 8]
        [--draft qwen2.5-coder-0.5b] [--out bench/results/decoding.md]

Prompts: the main job's round-1 agent prompts (README's 20 default questions, seed 0), built
exactly as its clients build them: GSM8K questions to the statistician (a Python program) and
the mathematician (chain of thought), MedQA questions to the physician. All modes run in this
process on the same prompts, interleaved per prompt, greedy, with llama-cpp-python's
high-level ``Llama.generate`` (the only speculative loop it ships):

- ``plain``: one token per ``llama_decode``;
- ``lookup``: prompt-lookup decoding (``LlamaPromptLookupDecoding``, ``--k`` drafted tokens
  copied from an n-gram match in the prompt and the text so far);
- ``draft``: the 0.5B model drafts ``--k`` tokens greedily for the 1.5B (``--draft none``
  skips it).

A speculative step verifies the drafted tokens in one ``llama_decode`` of several positions.
That can only pay where decoding ``n`` positions costs much less than ``n`` single steps, so
the script first measures exactly that (``verify``: one position vs ``n`` positions of one
sequence after a real prompt). Texts are compared with ``plain``'s; a mode is "identical" only
if every prompt's text matches.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pfedma_flwr.agents.backends.embedded import embedded_model_path  # noqa: E402
from pfedma_flwr.agents.program import program_messages  # noqa: E402
from pfedma_flwr.agents.prompting import build_reasoning_messages  # noqa: E402
from pfedma_flwr.data.profiles import get_profile  # noqa: E402
from pfedma_flwr.data.split import sample_eval_tasks  # noqa: E402


def main_job_prompts(n: int) -> list[list[dict[str, str]]]:
    """``n`` round-1 prompts of the main job's agents (see module docstring)."""
    tasks = sample_eval_tasks(["gsm8k", "medqa"], 10, 0, None, dev_pool_per_benchmark=200)
    gsm = [t for t in tasks if t.benchmark == "gsm8k"]
    med = [t for t in tasks if t.benchmark == "medqa"]
    stat, maths, doc = (get_profile(p) for p in ("statistician", "mathematician", "physician"))
    out: list[list[dict[str, str]]] = []
    for k in range(n):
        if k % 3 == 0:
            out.append(program_messages(profile_prompt=stat.prompt, query_text=gsm[k].question))
        elif k % 3 == 1:
            out.append(build_reasoning_messages(profile_prompt=maths.prompt,
                                                query_text=gsm[k].question, answer_kind="number"))
        else:
            t = med[k]
            out.append(build_reasoning_messages(profile_prompt=doc.prompt, query_text=t.question,
                                                answer_kind=t.answer_kind))
    return out


class DraftLlama:
    """A ``LlamaDraftModel``: a smaller model of the same vocabulary drafts ``k`` greedy tokens.

    Keeps its KV cache across calls and re-evaluates only what changed since the last call.
    """

    def __init__(self, llm: Any, ll: Any, k: int) -> None:
        self.llm, self.ll, self.k = llm, ll, k
        self.seconds = 0.0

    def _argmax(self) -> int:
        ptr = self.ll.llama_get_logits_ith(self.llm._ctx.ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(ptr, shape=(self.llm.n_vocab(),))))

    def __call__(self, input_ids: Any, /, **_: Any) -> Any:
        t0 = time.perf_counter()
        ids = [int(t) for t in input_ids]
        have = self.llm.input_ids[: self.llm.n_tokens].tolist()
        same = 0
        while same < min(len(have), len(ids) - 1) and have[same] == ids[same]:
            same += 1
        self.llm.n_tokens = same  # eval() drops the KV cells past n_tokens
        self.llm.eval(ids[same:])
        out: list[int] = []
        for _ in range(self.k):
            tok = self._argmax()
            if self.ll.llama_vocab_is_eog(self.llm._model.vocab, tok):
                break
            out.append(tok)
            self.llm.eval([tok])
        self.seconds += time.perf_counter() - t0
        return np.array(out, dtype=np.intc)


def verify_cost(llm: Any, prompt: list[int], sizes: tuple[int, ...] = (1, 2, 4, 8),
                reps: int = 3) -> dict[int, float]:
    """Seconds of one ``eval`` of ``n`` positions after ``prompt`` (best of ``reps``)."""
    llm.reset()
    llm.eval(prompt)
    n0 = llm.n_tokens
    out: dict[int, float] = {}
    for n in sizes:
        best = float("inf")
        for _ in range(reps):
            llm.n_tokens = n0
            t0 = time.perf_counter()
            llm.eval(prompt[-n:])  # any n tokens: the cost does not depend on which
            best = min(best, time.perf_counter() - t0)
        out[n] = best
    llm.n_tokens = n0
    return out


def generate(llm: Any, prompt: list[int], max_tokens: int) -> tuple[list[int], float]:
    """Greedy tokens after ``prompt`` (until EOS or ``max_tokens``) and the seconds taken."""
    llm.reset()
    toks: list[int] = []
    t0 = time.perf_counter()
    for tok in llm.generate(prompt, temp=0.0, top_k=1, top_p=1.0, min_p=0.0,
                            repeat_penalty=1.0, reset=True):
        if llm.token_eos() == tok or len(toks) >= max_tokens:
            break
        toks.append(tok)
    return toks, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--draft", default="qwen2.5-coder-0.5b", help="draft model, or none")
    ap.add_argument("--n", type=int, default=8, help="prompts")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--k", type=int, default=8, help="tokens drafted per step")
    ap.add_argument("--out", type=Path, default=None, help="also write the Markdown here")
    a = ap.parse_args(argv)
    import llama_cpp as ll
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    path = str(embedded_model_path(a.model))
    common = {"n_ctx": 4096, "n_batch": 512, "n_threads": a.threads,
              "n_threads_batch": a.threads, "verbose": False}
    modes: dict[str, Any] = {"plain": ll.Llama(model_path=path, **common),
                             "lookup": ll.Llama(model_path=path, **common,
                                                draft_model=LlamaPromptLookupDecoding(
                                                    max_ngram_size=3, num_pred_tokens=a.k))}
    drafter = None
    if a.draft != "none":
        small = ll.Llama(model_path=str(embedded_model_path(a.draft)), **common)
        drafter = DraftLlama(small, ll, a.k)
        modes["draft"] = ll.Llama(model_path=path, **common, draft_model=drafter)
    plain = modes["plain"]
    fmt = ll.llama_chat_format.Jinja2ChatFormatter(
        template=plain.metadata["tokenizer.chat_template"], eos_token="<|im_end|>",
        bos_token="", stop_token_ids=[plain.token_eos()])
    prompts = [plain.tokenize(fmt(messages=m).prompt.encode(), add_bos=False, special=True)
               for m in main_job_prompts(a.n)]
    # the speculative models keep logits of every position (logits_all), as verification needs
    cost = verify_cost(modes["lookup"], prompts[0])
    secs = dict.fromkeys(modes, 0.0)
    toks = dict.fromkeys(modes, 0)
    same = dict.fromkeys(modes, 0)
    for k, p in enumerate(prompts):
        ref: list[int] = []
        for name, llm in modes.items():
            out, s = generate(llm, p, a.max_tokens)
            ref = out if name == "plain" else ref
            secs[name] += s
            toks[name] += len(out)
            same[name] += out == ref
            print(f"prompt {k} ({len(p)} tokens) {name}: {len(out)} tokens in {s:.1f} s, "
                  f"{'same' if out == ref else 'DIFFERENT'}", flush=True)
    lines = [f"`python3 bench/bench_decoding.py --n {a.n} --max-tokens {a.max_tokens} "
             f"--threads {a.threads} --k {a.k} --draft {a.draft}` ({a.model}, greedy)", "",
             "| positions per llama_decode | seconds | per position | vs n single steps |",
             "|---|---|---|---|"]
    lines += [f"| {n} | {s:.3f} | {s / n:.3f} | {s / (n * cost[1]):.2f} |"
              for n, s in cost.items()]
    lines += ["", "| mode | tokens | seconds | tok/s | speed-up vs plain | identical texts |",
              "|---|---|---|---|---|---|"]
    for name in modes:
        rate = toks[name] / secs[name] if secs[name] else 0.0
        lines.append(f"| {name} | {toks[name]} | {secs[name]:.1f} | {rate:.2f} | "
                     f"{secs['plain'] / secs[name]:.2f}x | {same[name]}/{len(prompts)} |")
    if drafter is not None:
        lines.append(f"\ndraft model time inside `draft`: {drafter.seconds:.1f} s")
    text = "\n".join(lines)
    print(text)
    if a.out:
        a.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
