"""``tenter.Estimator``: the SageMaker Python SDK's estimator, running through tenter.

    est = Estimator(entry_point="train.py", source_dir=".", instance_count=2,
                    instance_type="local", hyperparameters={"epochs": 3},
                    distribution={"torch_distributed": {"enabled": True}})
    est.fit({"training": "data/train"})   # blocks, streams logs, raises JobFailedError

Arguments that only make sense on AWS (``role``, ``framework_version``...) are accepted so
that SageMaker code runs unchanged, with a warning that they are ignored; any other
unknown argument is an error, never silently dropped.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from tenter.spec import JobSpec, load
from tenter.spec.errors import did_you_mean

SAGEMAKER_ONLY = frozenset(
    {
        "role",
        "framework_version",
        "py_version",
        "image_uri",
        "sagemaker_session",
        "output_path",
        "code_location",
        "volume_size",
        "volume_kms_key",
        "subnets",
        "security_group_ids",
        "tags",
        "metric_definitions",
        "disable_profiler",
        "debugger_hook_config",
        "keep_alive_period_in_seconds",
        "use_spot_instances",
        "max_wait",
        "checkpoint_s3_uri",
        "enable_sagemaker_metrics",
    }
)


class Estimator:
    """A training job described the SageMaker way; :meth:`fit` runs it."""

    def __init__(
        self,
        entry_point: str,
        source_dir: str | None = None,
        instance_count: int = 1,
        instance_type: str = "local",
        hyperparameters: dict[str, Any] | None = None,
        distribution: dict[str, Any] | None = None,
        environment: dict[str, str] | None = None,
        max_run: int | None = None,
        base_job_name: str | None = None,
        processes_per_host: int | None = None,
        output_dir: str | None = None,
        backend: str = "local",
        **sagemaker_kwargs: Any,
    ) -> None:
        for name in sagemaker_kwargs:
            if name not in SAGEMAKER_ONLY:
                raise TypeError(
                    f"Estimator() got an unexpected argument '{name}'."
                    f"{did_you_mean(name, [*self._fields(), *SAGEMAKER_ONLY])}"
                )
        if sagemaker_kwargs:
            warnings.warn(
                f"ignored by tenter (they configure AWS): {', '.join(sorted(sagemaker_kwargs))}",
                stacklevel=2,
            )
        data: dict[str, Any] = {
            "entry_point": entry_point,
            "source_dir": source_dir or ".",
            "instance_count": instance_count,
            "instance_type": instance_type,
            "hyperparameters": hyperparameters or {},
            "distribution": distribution or {},
            "environment": environment or {},
            "backend": backend,
        }
        optional = {
            "max_run": max_run,
            "name": base_job_name,
            "processes_per_host": processes_per_host,
            "output_dir": output_dir,
        }
        data.update({k: v for k, v in optional.items() if v is not None})
        self._data = data
        self.spec = self._load({})
        self.latest_job: Any = None

    @staticmethod
    def _fields() -> list[str]:
        return [
            "entry_point",
            "source_dir",
            "instance_count",
            "instance_type",
            "hyperparameters",
            "distribution",
            "environment",
            "max_run",
            "base_job_name",
            "processes_per_host",
            "output_dir",
            "backend",
        ]

    def _load(self, extra: dict[str, Any]) -> JobSpec:
        spec, problems = load({**self._data, **extra}, Path.cwd())
        for p in problems:
            warnings.warn(str(p), stacklevel=3)
        return spec

    def fit(
        self,
        inputs: str | dict[str, str] | None = None,
        wait: bool = True,
        logs: bool = True,
        job_name: str | None = None,
    ) -> None:
        """Run the job with these input channels; block until it ends.

        ``inputs`` is a path (the ``training`` channel) or a dict of channel name -> path.
        Raises :class:`tenter.JobFailedError` (with the failure summary) if the job fails.
        """
        if not wait:
            raise ValueError(
                "fit(wait=False) is not supported: tenter runs the job in this process; "
                "use `tenter run` in a shell to run it in the background"
            )
        channels = {"training": inputs} if isinstance(inputs, str) else dict(inputs or {})
        extra: dict[str, Any] = {"channels": channels}
        if not logs:
            extra["logs"] = {"ranks": []}
        self.spec = self._load(extra)
        from tenter import session
        from tenter.launch.api import JobFailedError

        result = session.run(self.spec, job_name)
        self.latest_job = result
        print(result.summary, flush=True)
        if not result.ok:
            raise JobFailedError(result, result.summary)

    @property
    def model_data(self) -> str:
        """The model directory of the last job (SageMaker uploads host 1's)."""
        if self.latest_job is None:
            raise RuntimeError("no job has run yet: call fit() first")
        return str(Path(self.latest_job.job_dir) / "hosts" / "algo-1" / "model")
