"""PFedMA: federated multi-agent LLM orchestration with privacy-rule co-evolution, on Flower."""

# Equal to [project].version in pyproject.toml and pfedma_flwr/_app/pyproject.toml (a unit test
# checks): Flower requires a literal version there, so this cannot be read from one place.
__version__ = "0.1.0"
