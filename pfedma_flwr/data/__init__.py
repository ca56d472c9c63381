"""Benchmark data, the eval/dev split, client partitions ``D_i``, few-shot retrieval, profiles."""

from pfedma_flwr.data.benchmarks import (
    ANSWER_KINDS,
    BENCHMARKS,
    DATA_DIR_ENV,
    TASK_DOMAINS,
    DataFormatError,
    Task,
    clear_benchmark_cache,
    load_benchmark,
    load_gsm8k,
    load_medqa,
    resolve_data_dir,
)
from pfedma_flwr.data.partition import (
    SCHEMES,
    clear_partition_cache,
    partition_sizes,
    partition_tasks,
)
from pfedma_flwr.data.profiles import (
    BUILTIN_PROFILES,
    KNOWLEDGE_DOMAINS,
    PROFILES,
    AgentProfile,
    get_profile,
    knowledge_domain,
    profile_for_client,
)
from pfedma_flwr.data.retrieval import (
    FewShotRetriever,
    clear_retrieval_cache,
    get_retriever,
    retrieve_examples,
)
from pfedma_flwr.data.split import (
    BenchmarkSplit,
    dev_pool,
    sample_eval_tasks,
    split_benchmark,
    split_tasks,
)

__all__ = [
    "ANSWER_KINDS",
    "BENCHMARKS",
    "BUILTIN_PROFILES",
    "DATA_DIR_ENV",
    "KNOWLEDGE_DOMAINS",
    "PROFILES",
    "SCHEMES",
    "TASK_DOMAINS",
    "AgentProfile",
    "BenchmarkSplit",
    "DataFormatError",
    "FewShotRetriever",
    "Task",
    "clear_benchmark_cache",
    "clear_partition_cache",
    "clear_retrieval_cache",
    "dev_pool",
    "get_profile",
    "get_retriever",
    "knowledge_domain",
    "load_benchmark",
    "load_gsm8k",
    "load_medqa",
    "partition_sizes",
    "partition_tasks",
    "profile_for_client",
    "resolve_data_dir",
    "retrieve_examples",
    "sample_eval_tasks",
    "split_benchmark",
    "split_tasks",
]
