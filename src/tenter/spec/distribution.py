"""``distribution``: SageMaker's schema for how a job is distributed.

Accepted keys, as the SageMaker Python SDK spells them::

    smdistributed: {dataparallel: {enabled, custom_mpi_options},
                    modelparallel: {enabled, parameters: {...}}}
    mpi: {enabled, processes_per_host, custom_mpi_options}
    torch_distributed: {enabled}
    pytorchddp: {enabled}        # SageMaker >= 2.221 alias of smdistributed.dataparallel

Exactly one data-parallel launcher may be enabled; model parallelism combines with ``mpi``
or ``torch_distributed``.
"""

from __future__ import annotations

from pydantic import PositiveInt

from tenter.spec.base import StrictModel
from tenter.spec.errors import FieldError, Problem
from tenter.spec.modelparallel import ModelParallelParameters
from tenter.spec.mpi_options import MpiOptions, parse_mpi_options


class Toggle(StrictModel):
    enabled: bool = False


class DataParallel(StrictModel):
    enabled: bool = False
    custom_mpi_options: str = ""


class ModelParallel(StrictModel):
    enabled: bool = False
    parameters: ModelParallelParameters = ModelParallelParameters()


class SmDistributed(StrictModel):
    dataparallel: DataParallel = DataParallel()
    modelparallel: ModelParallel = ModelParallel()


class Mpi(StrictModel):
    enabled: bool = False
    processes_per_host: PositiveInt | None = None
    custom_mpi_options: str = ""


class Distribution(StrictModel):
    smdistributed: SmDistributed = SmDistributed()
    mpi: Mpi = Mpi()
    torch_distributed: Toggle = Toggle()
    pytorchddp: Toggle = Toggle()

    @property
    def data_parallel(self) -> bool:
        """SMDDP requested, under either of its names."""
        return self.smdistributed.dataparallel.enabled or self.pytorchddp.enabled

    @property
    def model_parallel(self) -> ModelParallelParameters | None:
        mp = self.smdistributed.modelparallel
        return mp.parameters if mp.enabled else None

    def user_mpi_options(self) -> MpiOptions:
        """The user's ``custom_mpi_options`` (mpi and dataparallel), merged; validated by
        :meth:`problems` first."""
        opts = MpiOptions()
        for text in (
            self.mpi.custom_mpi_options,
            self.smdistributed.dataparallel.custom_mpi_options,
        ):
            opts = parse_mpi_options(text).merged_over(opts)
        return opts

    def problems(self, world_size: int) -> list[Problem]:
        out: list[Problem] = []
        sm = self.smdistributed
        if sm.dataparallel.enabled and sm.modelparallel.enabled:
            out.append(
                Problem(
                    "distribution.smdistributed",
                    "dataparallel and modelparallel are both enabled; SageMaker's libraries "
                    "cannot be combined",
                    "use modelparallel with its 'ddp: true' parameter for data parallelism "
                    "across pipeline replicas",
                )
            )
        if self.pytorchddp.enabled and (sm.dataparallel.enabled or sm.modelparallel.enabled):
            out.append(
                Problem(
                    "distribution.pytorchddp",
                    "cannot be combined with smdistributed (pytorchddp is another name for "
                    "smdistributed.dataparallel)",
                    "enable only one of them",
                )
            )
        launchers = [
            name
            for name, on in (
                ("smdistributed.dataparallel", sm.dataparallel.enabled),
                ("pytorchddp", self.pytorchddp.enabled),
                ("torch_distributed", self.torch_distributed.enabled),
                ("mpi", self.mpi.enabled),
            )
            if on
        ]
        if len(launchers) > 1 and not sm.modelparallel.enabled:
            out.append(
                Problem(
                    "distribution",
                    f"{' and '.join(launchers)} are all enabled",
                    "enable one way of launching the processes",
                )
            )
        for path, text in (
            ("distribution.mpi.custom_mpi_options", self.mpi.custom_mpi_options),
            (
                "distribution.smdistributed.dataparallel.custom_mpi_options",
                sm.dataparallel.custom_mpi_options,
            ),
        ):
            try:
                parse_mpi_options(text)
            except FieldError as e:
                out.append(Problem(path, f"{text!r} {e.what}", e.fix))
        if sm.modelparallel.enabled:
            params = sm.modelparallel.parameters
            path = "distribution.smdistributed.modelparallel.parameters"
            out += params.problems(world_size, path)
            if not (params.v1_parameters and params.v2_parameters):  # else said once above
                out += params.unsupported(path)
            if params.version == 2 and not self.torch_distributed.enabled:
                out.append(
                    Problem(
                        "distribution.torch_distributed.enabled",
                        "SMP v2 parameters ("
                        + ", ".join(params.v2_parameters or ["tensor_parallel_degree"])
                        + ") need the torch_distributed launcher, as SageMaker's SMP v2 does",
                        "set distribution.torch_distributed.enabled: true",
                    )
                )
        return out
