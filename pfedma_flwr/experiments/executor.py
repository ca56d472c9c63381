"""The default executor of the runner: each variant as a real ``flwr run`` simulation.

:func:`flwr_executor` builds it; :mod:`pfedma_flwr.experiments.runner` uses it unless a caller
passes its own executor (tests: in-process, FakeGrid + ``run_server``). Variants run beside
each other (``jobs > 1``) take their slot's own SuperLink ports.
"""

from __future__ import annotations

from pfedma_flwr.experiments import processes
from pfedma_flwr.experiments.variant import Executor, VariantFailed, VariantRun

_SLOT_PORTS = 10
_DEFAULT_PORT = 39291


def flwr_executor(
    port: int | None = None,
    timeout: float = 3600.0,
    data_dir: str = "",
    log_level: str | None = None,
    quiet: bool = False,
) -> Executor:
    """An executor running each variant as a real ``flwr run`` simulation (``launch.run``).

    ``port=None``: the default port, or a free one; under ``jobs > 1`` slot ``k > 0`` takes
    the port ``10 k`` above. A run stopped by a signal raises
    :class:`~pfedma_flwr.experiments.processes.Interrupted` (every process of it is stopped
    already), any other failure :class:`VariantFailed`.
    """

    def execute(v: VariantRun) -> None:
        from pfedma_flwr.experiments.launch import run  # Flower CLI machinery only when used

        # concurrent variants (slots) each need their own SuperLink ports
        slot_port = port if v.slot == 0 else (port or _DEFAULT_PORT) + _SLOT_PORTS * v.slot
        rc = run(
            config=v.config,
            num_clients=v.num_clients,
            output_dir=v.output_dir,
            overrides=v.overrides,
            port=slot_port,
            timeout=timeout,
            data_dir=data_dir,
            resume=v.resume,
            overwrite=v.overwrite,
            log_level=log_level,
            quiet=quiet,
            backend_check=False,  # checked once for every variant by check_plan
        )
        if rc >= 128:
            raise processes.Interrupted(rc - 128)
        if rc != 0:
            raise VariantFailed(
                f"variant {v.variant} of {v.experiment} failed (exit {rc}); "
                f"see {v.output_dir / 'run.log'}",
                rc,
            )

    return execute
