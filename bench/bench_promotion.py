"""Time support_proportions + promote + Resolve on 1000 candidates vs one plain 1000×384 matmul.

Embeddings: 384-d random unit vectors, 60 % of them in 40 tight clusters (cos ≥ 0.9 to their
centroid's other members) and the rest isolated, so clustering and merging have real work.
Every timing is the median of ``--repeats`` runs, all measured in this one process.

    PYTHONPATH=. python3 bench/bench_promotion.py [--n 1000] [--dim 384] [--repeats 15]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Callable

import numpy as np

from pfedma_flwr.rules.server.promotion import promote, support_proportions
from pfedma_flwr.rules.server.resolve import resolve

log = logging.getLogger("bench_promotion")


def make_embeddings(n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    n_clustered = int(0.6 * n)
    centroids = rng.standard_normal((40, dim))
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    labels = rng.integers(0, 40, n_clustered)
    noise = rng.standard_normal((n_clustered, dim)) * (0.15 / np.sqrt(dim))
    clustered = centroids[labels] + noise
    rest = rng.standard_normal((n - n_clustered, dim))
    e = np.vstack([clustered, rest]).astype(np.float32)
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    return e[rng.permutation(n)]


def median_time(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    rng = np.random.default_rng(0)
    emb = make_embeddings(args.n, args.dim, rng)
    specs = [("response", "redact" if k % 3 else "generalize") for k in range(args.n)]
    h = rng.uniform(-1, 1, args.n).tolist()
    nn = rng.integers(0, 5, args.n).tolist()

    def pipeline() -> None:
        promote(support_proportions(emb, 0.9))
        resolve(emb, specs, h, nn, threshold=0.9)

    t_matmul = median_time(lambda: emb @ emb.T, args.repeats)
    t_support = median_time(lambda: promote(support_proportions(emb, 0.9)), args.repeats)
    t_resolve = median_time(lambda: resolve(emb, specs, h, nn, threshold=0.9), args.repeats)
    t_all = median_time(pipeline, args.repeats)
    res = resolve(emb, specs, h, nn, threshold=0.9)
    log.info(
        "n=%d dim=%d clusters=%d representatives=%d promoted=%d",
        args.n, args.dim, len(set(res.cluster.tolist())), len(res.representatives),
        len(promote(support_proportions(emb, 0.9))),
    )
    log.info("matmul %dx%d @ %dx%d : %.3f ms", args.n, args.dim, args.dim, args.n, 1e3 * t_matmul)
    log.info("support+promote      : %.3f ms", 1e3 * t_support)
    log.info("resolve              : %.3f ms", 1e3 * t_resolve)
    log.info("support+promote+resolve: %.3f ms  ratio vs matmul: %.2fx", 1e3 * t_all,
             t_all / t_matmul)


if __name__ == "__main__":
    main()
