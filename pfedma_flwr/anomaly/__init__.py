"""Server-side reliability evaluation of uploaded responses (DESIGN §3.7, §3.13)."""

from pfedma_flwr.anomaly.judges import JUDGES, EmbeddingJudge, Judge
from pfedma_flwr.anomaly.llm_judge import LLMJudge, parse_score
from pfedma_flwr.anomaly.scores import (
    Ablation,
    AnomalyResult,
    ablated_anomaly_score,
    anomaly_score,
    answer_similarity_matrix,
    consensus_anomalies,
    evaluate_batch,
    evaluate_responses,
    evidence_anomaly,
    similarity_to,
)

__all__ = [
    "JUDGES",
    "Ablation",
    "AnomalyResult",
    "EmbeddingJudge",
    "Judge",
    "LLMJudge",
    "ablated_anomaly_score",
    "anomaly_score",
    "answer_similarity_matrix",
    "consensus_anomalies",
    "evaluate_batch",
    "evaluate_responses",
    "evidence_anomaly",
    "parse_score",
    "similarity_to",
]
