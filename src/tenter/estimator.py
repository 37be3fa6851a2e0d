"""``tenter.Estimator``: the SageMaker Python SDK's PyTorch estimator, running through tenter.

    from tenter import Estimator as PyTorch

    est = PyTorch("train.py", source_dir=".", instance_count=2, instance_type="local",
                  framework_version="2.5", py_version="py311", role="...",  # noted, ignored
                  hyperparameters={"epochs": 3},
                  distribution={"torch_distributed": {"enabled": True}})
    est.fit({"training": "data/train"})   # blocks, streams logs, raises JobFailedError
    est.fit("file://data/train", wait=False)        # returns at once
    est.latest_training_job.wait()                  # blocks, replays the logs

Arguments follow the SDK's ``PyTorch`` (``entry_point`` first, everything else by keyword).
Those that only configure AWS (``role``, ``framework_version``, ``output_kms_key``...) are
accepted so that SageMaker code runs unchanged, with one warning naming them; any other
unknown argument is a TypeError, never silently dropped. See docs/estimator.md.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import threading
import warnings
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tenter.contract.sagemaker import host_names, hyperparameters_json
from tenter.jobdir import layout
from tenter.spec import JobSpec, load
from tenter.spec.errors import did_you_mean

if TYPE_CHECKING:
    from tenter.jobdir.handle import JobHandle
    from tenter.jobdir.results import JobResult
    from tenter.launch.api import Request
    from tenter.session import Watch

AWS_ONLY = frozenset(
    {
        # PyTorch
        "framework_version",
        "py_version",
        "image_uri",
        "compiler_config",
        "training_recipe",
        "recipe_overrides",
        # Framework
        "container_log_level",
        "code_location",
        "dependencies",
        "enable_network_isolation",
        "git_config",
        "checkpoint_s3_uri",
        "enable_sagemaker_metrics",
        # EstimatorBase
        "role",
        "keep_alive_period_in_seconds",
        "volume_size",
        "volume_kms_key",
        "input_mode",
        "output_path",
        "output_kms_key",
        "sagemaker_session",
        "tags",
        "subnets",
        "security_group_ids",
        "model_uri",
        "model_channel_name",
        "metric_definitions",
        "encrypt_inter_container_traffic",
        "use_spot_instances",
        "max_wait",
        "rules",
        "debugger_hook_config",
        "tensorboard_output_config",
        "profiler_config",
        "disable_profiler",
        "max_retry_attempts",
        "instance_groups",
        "training_repository_access_mode",
        "training_repository_credentials_provider_arn",
        "enable_infra_check",
        "container_entry_point",
        "container_arguments",
        "disable_output_compression",
        "enable_remote_debug",
        "enable_session_tag_chaining",
        "training_plan",
        "instance_placement_config",
    }
)
"""The SDK's arguments (sagemaker 2.257) that configure AWS only: accepted, noted, ignored."""

LOCAL_WAY = {
    "dependencies": "put those folders on PYTHONPATH with environment=",
    "git_config": "check the repository out and pass its folder as source_dir",
    "model_uri": "pass the model's folder to fit() as a channel",
    "checkpoint_s3_uri": "checkpoints stay in checkpoint_local_path",
}
"""How to get, locally, what an ignored argument did on AWS."""

DEFAULT_CHANNEL = "training"
"""The channel a single input goes to, as in the SDK."""

LOGS = {"All": True, "Training": True, "Rules": False, "None": False}
"""``fit(logs=...)``: whether the ranks' output is shown (no Debugger rules run here)."""

_CHANNEL_DEFAULTS = {
    "S3DataType": "S3Prefix",
    "S3DataDistributionType": "FullyReplicated",
    "FileSystemAccessMode": "ro",
}
"""Channel settings that mean what a local folder does: not worth a warning."""
_CHANNEL_SOURCE = {"DataSource", "S3Uri", "DirectoryPath", "FileSystemId", "FileSystemType"}


def _note_ignored(names: list[str]) -> None:
    text = f"ignored by tenter (they configure AWS): {', '.join(sorted(names))}"
    ways = [f"{n}: {LOCAL_WAY[n]}" for n in sorted(names) if n in LOCAL_WAY]
    warnings.warn(text + "".join(f"; {w}" for w in ways), stacklevel=3)


def _local_path(channel: str, uri: str) -> str:
    if uri.startswith("s3://"):
        raise ValueError(
            f"fit(inputs): channel '{channel}' is '{uri}', on S3; tenter reads local folders: "
            f"copy it (aws s3 sync {uri} DIR) and pass DIR or 'file://DIR'"
        )
    return uri.removeprefix("file://")


def _channel_path(channel: str, value: object) -> tuple[str, list[str]]:
    """The local folder of one channel, and the settings of it that tenter does not apply.

    ``value`` is a path (``file://`` allowed) or an object shaped like the SDK's
    ``TrainingInput`` / ``FileSystemInput``, whose ``config`` dict holds the source."""
    if isinstance(value, str):
        return _local_path(channel, value), []
    config = getattr(value, "config", None)
    if not isinstance(config, Mapping):
        config = {}
    source = config.get("DataSource", {})
    s3 = source.get("S3DataSource")
    file_system = source.get("FileSystemDataSource")
    if isinstance(s3, Mapping) and isinstance(s3.get("S3Uri"), str):
        path, settings = _local_path(channel, s3["S3Uri"]), {**config, **s3}
    elif isinstance(file_system, Mapping) and isinstance(file_system.get("DirectoryPath"), str):
        # An EFS or FSx mount: the same path on this machine.
        path, settings = file_system["DirectoryPath"], {**config, **file_system}
    else:
        raise TypeError(
            f"fit(inputs): channel '{channel}' has type {type(value).__name__}; give a local path, "
            "'file://PATH', or a TrainingInput/FileSystemInput whose data is a local path"
        )
    ignored = [
        f"{k}={v}"
        for k, v in settings.items()
        if k not in _CHANNEL_SOURCE and v != _CHANNEL_DEFAULTS.get(k)
    ]
    return path, ignored


def channels(inputs: object) -> dict[str, str]:
    """``fit(inputs)`` as channel name -> local path; warns about channel settings (sharding,
    input mode...) that tenter does not apply: every host sees the whole folder."""
    if inputs is None:
        return {}
    items = inputs.items() if isinstance(inputs, Mapping) else [(DEFAULT_CHANNEL, inputs)]
    out: dict[str, str] = {}
    for name, value in items:
        out[str(name)], ignored = _channel_path(str(name), value)
        if ignored:
            warnings.warn(
                f"channel '{name}': not applied by tenter (every host sees the whole folder): "
                + ", ".join(ignored),
                stacklevel=3,
            )
    return out


def shows_logs(logs: str | bool) -> bool:
    """The SDK's ``logs`` argument: a bool, or one of ``All``, ``Training``, ``Rules``, ``None``."""
    if isinstance(logs, bool):
        return logs
    if logs not in LOGS:
        raise ValueError(f"logs={logs!r}: use one of {', '.join(map(repr, LOGS))}, or True/False")
    return LOGS[logs]


STATUSES = {
    "succeeded": ("Completed", "Completed"),
    "interrupted": ("Stopped", "Stopped"),
    "max_run": ("Stopped", "MaxRuntimeExceeded"),
    "preempted": ("Stopped", "Interrupted"),
}
"""A result's ``state`` -> DescribeTrainingJob's ``TrainingJobStatus`` and ``SecondaryStatus``
(as SageMaker reports a stop, a job past ``max_run`` and a spot interruption); any other
state: ``Failed``."""

STOPPED_WARNING = (
    "Job ended with status 'Stopped' rather than 'Completed'. This could mean the job timed "
    "out or stopped early for some reason: Consider checking whether it completed as you expect."
)
"""What the SDK's ``wait()`` logs, instead of raising, for a stopped job."""

logger = logging.getLogger(__name__)


def job_status(result: JobResult | None, stopping: bool) -> tuple[str, str]:
    """``TrainingJobStatus`` and ``SecondaryStatus`` of a job with this result (None: running;
    ``stopping``: ``stop()`` was called)."""
    if result is None:
        return ("Stopping", "Stopping") if stopping else ("InProgress", "Training")
    return STATUSES.get(result.state, ("Failed", "Failed"))


def _model_dir(job_dir: str) -> str:
    # SageMaker uploads the model directory of its first host.
    return str(layout.host_model_dir(job_dir, host_names(1)[0]))


class TrainingJob:
    """A job :meth:`Estimator.fit` started: the SDK's ``estimator.latest_training_job``.

    A detached job (``fit(wait=False)``) runs under a launcher process of its own, as
    ``tenter run --detach`` does; ``wait()`` follows it, ``stop()`` cancels it.
    """

    def __init__(self, request: Request, watch: Watch, spec: JobSpec) -> None:
        self.request = request
        self.watch = watch
        """How ``fit`` shows the job's output while it runs."""
        self.spec = spec
        self.name = request.job_id
        """The job id (the SDK's training job name)."""
        self.job_dir: str = request.job_dir
        self.result: JobResult | None = None
        """The outcome, once the job has ended."""
        self.created = datetime.now(UTC)
        self._handle: JobHandle | None = None
        self._stopping = False
        self._reported = False

    @property
    def job_name(self) -> str:
        return self.name

    def start(self, detach: bool) -> None:
        from tenter import session

        if detach:
            self._handle, _ = session.submit(self.request, self.watch, detach=True)
        else:
            self.result = session.run_request(self.request, self.watch)

    def wait(self, logs: str | bool = "All") -> JobResult:
        """Block until the job ends, as the SDK's ``wait()``: the ranks' output of a detached
        job from its start and the end-of-job summary, unless ``logs`` says not to. A failed
        job raises :class:`tenter.JobFailedError`; a stopped one (``stop()``, ``max_run``, a
        preemption) logs the SDK's warning and returns."""
        from tenter.launch.api import JobFailedError

        show = shows_logs(logs)
        if self.result is None and self._handle is not None:
            self.result = self._follow(show)
        assert self.result is not None, "a started job has a result once waited for"
        if show and not self._reported:
            self._reported = True
            print(self.result.summary, flush=True)
        status, _ = job_status(self.result, self._stopping)
        if status == "Stopped":
            logger.warning(STOPPED_WARNING)
        elif status == "Failed":
            raise JobFailedError(self.result, self.result.summary)
        return self.result

    def _follow(self, show: bool) -> JobResult:
        from tenter.launch.api import get_backend

        assert self._handle is not None
        backend = get_backend(self._handle.backend)
        # Every rank's output from the start (the job itself was started showing none).
        tail = backend.logs(self._handle, None if show else [], True, follow=True).start()
        try:
            return backend.wait(self._handle, threading.Event())
        finally:
            tail.stop()

    def stop(self) -> None:
        """Stop a detached job (the SDK's ``stop()``): it is ``Stopping`` until it has ended,
        then ``Stopped``; ``wait()`` then returns with a warning."""
        from tenter.launch.api import get_backend

        if self._handle is not None and self.result is None:
            self._stopping = True
            get_backend(self._handle.backend).cancel(self._handle)

    def describe(self) -> dict[str, Any]:
        """SageMaker's DescribeTrainingJob, with the fields that mean something here."""
        result = self.result
        if result is None and self._handle is not None:
            from tenter.jobdir.results import read_result

            result = read_result(Path(self.job_dir))
        status, secondary = job_status(result, self._stopping)
        out: dict[str, Any] = {
            "TrainingJobName": self.name,
            "TrainingJobStatus": status,
            "SecondaryStatus": secondary,
            "HyperParameters": hyperparameters_json(self.spec.hyperparameters),
            "ResourceConfig": {
                "InstanceType": self.spec.instance_type,
                "InstanceCount": self.spec.instance_count,
            },
            "CreationTime": self.created,
            "TrainingStartTime": self.created,
        }
        if self.spec.max_run is not None:
            out["StoppingCondition"] = {"MaxRuntimeInSeconds": self.spec.max_run}
        if result is None:
            return out
        out.update(
            ModelArtifacts={"S3ModelArtifacts": _model_dir(result.job_dir)},
            TrainingEndTime=self.created + timedelta(seconds=result.duration_s),
            TrainingTimeInSeconds=round(result.duration_s),
        )
        if status == "Failed":
            out["FailureReason"] = result.summary
        return out


class Estimator:
    """A training job described the SageMaker way; :meth:`fit` runs it."""

    def __init__(
        self,
        entry_point: str,
        *,
        source_dir: str | None = None,
        hyperparameters: dict[str, Any] | None = None,
        distribution: dict[str, Any] | None = None,
        instance_count: int = 1,
        instance_type: str = "local",
        environment: dict[str, str] | None = None,
        secrets: list[str] | None = None,
        max_run: int | None = None,
        base_job_name: str | None = None,
        checkpoint_local_path: str | None = None,
        processes_per_host: int | None = None,
        output_dir: str | None = None,
        backend: str = "local",
        **aws_only: Any,
    ) -> None:
        for name in aws_only:
            if name not in AWS_ONLY:
                known = [*inspect.signature(Estimator).parameters, *AWS_ONLY]
                raise TypeError(
                    f"Estimator() got an unexpected argument '{name}'.{did_you_mean(name, known)}"
                )
        if aws_only:
            _note_ignored(list(aws_only))
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
            # Names of this process's variables the job gets, their values written nowhere.
            "secrets": secrets,
            "checkpoint": {"dir": checkpoint_local_path} if checkpoint_local_path else None,
        }
        data.update({k: v for k, v in optional.items() if v is not None})
        self._data = data
        self.spec = self._load({})
        self.latest_training_job: TrainingJob | None = None
        self.jobs: list[TrainingJob] = []

    @property
    def latest_job(self) -> TrainingJob | None:
        """tenter's earlier name of :attr:`latest_training_job`."""
        return self.latest_training_job

    def _load(self, extra: dict[str, Any]) -> JobSpec:
        spec, problems = load({**self._data, **extra}, Path.cwd())
        for p in problems:
            warnings.warn(str(p), stacklevel=3)
        return spec

    def fit(
        self,
        inputs: object = None,
        wait: bool = True,
        logs: str | bool = "All",
        job_name: str | None = None,
        experiment_config: dict[str, str] | None = None,
    ) -> None:
        """Run the job with these input channels, as the SDK's ``fit`` does.

        ``inputs``: a local path (``file://`` allowed) for the ``training`` channel, a
        ``TrainingInput``-like object, or a dict of channel name -> either. ``wait=False``
        returns once the job started; ``latest_training_job.wait()`` then blocks. ``logs``:
        ``"All"``/``True`` streams the ranks' output, ``"None"``/``False`` does not.
        Raises :class:`tenter.JobFailedError` (with the failure summary) if the job fails.
        """
        if experiment_config is not None:
            _note_ignored(["experiment_config"])
        self.spec = self._load({"channels": channels(inputs)})
        from tenter import session
        from tenter.launch import api

        watch = session.Watch.of(self.spec)
        if not wait or not shows_logs(logs):
            # A detached job prints nothing while the caller goes on; wait() replays it.
            watch = dataclasses.replace(watch, ranks=[])
        job = TrainingJob(api.dryrun(self.spec, job_name), watch, self.spec)
        self.latest_training_job = job
        self.jobs.append(job)
        job.start(detach=not wait)
        if wait:
            job.wait(logs)

    @property
    def model_data(self) -> str:
        """The model directory of the last job (SageMaker uploads host 1's)."""
        if self.latest_training_job is None:
            raise RuntimeError("no job has run yet: call fit() first")
        return _model_dir(self.latest_training_job.job_dir)

    def deploy(self, *args: Any, **kwargs: Any) -> None:
        """SageMaker hosts the model on an endpoint; tenter trains only."""
        raise NotImplementedError(
            "deploy() creates a SageMaker endpoint; tenter only trains: the trained model "
            "is in estimator.model_data"
        )
