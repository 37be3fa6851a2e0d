"""Every `tenter` command that README.md and docs/*.md show in a code block runs as written
(issue 38): each is run in a folder where the docs' placeholders are real (``train.py``,
``job.yaml``: the doc's own spec where it shows one, ``JOB``: a finished job, ``IMAGE``), with
its ``[optional]`` groups dropped and kept and each ``a|b`` alternative a command of its own.

``tenter run`` and ``tenter scale`` are checked as ``tenter plan --json`` with the same job
(what would run, without running it); the other quick commands run for real. A command that
cannot run here is in EXCLUDED with the reason and the test that covers it: a new command in
the docs fails this file until it is one or the other."""

from __future__ import annotations

import argparse
import itertools
import json
import re
import shlex
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tenter.cli.main import build_parser
from tests.conftest import REPO, Finished, job_dirs, tenter

pytestmark = pytest.mark.slow

DOCS = ["README.md", *sorted(p.relative_to(REPO).as_posix() for p in REPO.glob("docs/*.md"))]
TRAIN = "import sys\nprint('args', sys.argv[1:])\n"
TINY_SPEC = "entry_point: train.py\ninstance_count: 1\nprocesses_per_host: 1\n"
IMAGE = "registry.example.com/train:1.0"
PERF_LOGS = {  # the files `tenter perf compare a.log b.json c.log` compares
    "a.log": "old_untagged_efa_p3dn_all_reduce.log",
    "b.json": "tenter_v1_all_reduce.json",
    "c.log": "new_tagged_aws_batch_all_reduce.log",
}
RUN_ONLY_FLAGS = ("--detach", "--skip-preflight", "--live", "--no-live")
"""Flags of `tenter run` that `tenter plan` has not: what to do while it runs."""
SHELL_TAIL = re.compile(r"\s+(\|\s*kubectl\s.*|>\s*\S+)$")
"""Where a command's output goes: a pipe to kubectl or a redirect to a file (YAML, both)."""
COMMENT = re.compile(r"\s+#(\s.*)?$")

ISOLATED_JOB = "needs a running job on isolated hosts (network namespaces)"
SLOW_PERF = "far over the 20 s of a quick command here: 4 ranks on 2 cores, sizes up to 128 MiB"
FAULTS = "tests/launch/isolation/test_network_faults.py::"
PARTITION = FAULTS + "test_an_elastic_job_goes_on_without_a_partitioned_host_and_takes_it_back"
EXCLUDED = {
    "tenter doctor --job JOB": (
        ISOLATED_JOB,
        "tests/doctor/test_doctor_job.py::test_doctor_job_runs_inside_every_host_of_a_running_job",
    ),
    "tenter perf all_reduce -b 8 -e 16M --hosts 2 --isolation network": (
        "needs network namespaces",
        "tests/launch/isolation/test_multinode_mpirun.py::"
        "test_perf_all_reduce_through_mpirun_across_isolated_hosts",
    ),
    "tenter fault JOB partition algo-2": (ISOLATED_JOB, PARTITION),
    "tenter fault JOB heal algo-2": (ISOLATED_JOB, PARTITION),
    "tenter fault JOB kill algo-2": ("needs a running job", FAULTS + "test_kill_is_a_lost_host"),
    "tenter fault JOB kill --rank 1": (
        "needs a running job",
        "tests/sagemaker_user/test_fault_drills.py::"
        "test_fault_kill_rank_kills_one_worker_and_the_job_restarts",
    ),
    "tenter join JOB": (
        "needs a running elastic job",
        "tests/first_day/test_joins.py::test_the_documented_spec_and_example_grow_to_three_hosts",
    ),
    "tenter k8s status|cancel JOB --namespace ml": (
        "needs a Kubernetes API server",
        "tests/launch/kubernetes/test_k8s_backend.py::"
        "test_k8s_status_and_cancel_find_the_jobs_kind",
    ),
    "tenter perf all_reduce -b 8 -e 128M -f 2 -n 20 -w 5 -c 1 --hosts 2 --procs-per-host 2": (
        SLOW_PERF,
        "tests/perf/test_e2e.py::test_tenter_perf_runs_as_a_tenter_job",
    ),
    "tenter perf all_gather | reduce_scatter | broadcast | reduce | alltoall | sendrecv "
    "(same flags)": (
        f"six collectives with the flags of the line above: {SLOW_PERF}",
        "tests/perf/test_e2e.py::test_every_collective_runs_with_zero_wrong",
    ),
}
"""Documented commands not run here: why, and the test that covers what each does."""


@dataclass(frozen=True)
class Documented:
    doc: str
    """The file, relative to the repository."""
    line: str
    """The command as written: continuations joined, comment and output's destination cut."""
    sink: str
    """Where the doc sends its output (``| kubectl apply -f -``, ``> cluster.yaml``), or ''."""


def fenced_lines(text: str) -> Iterator[str]:
    """The lines inside the ``` code blocks, continuations (a trailing backslash) joined;
    not those of a ```text block (a program's output, whose lines may begin with "tenter")."""
    block, inside, pending = False, False, ""
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            block = not block
            inside, pending = block and line.strip() != "```text", ""
        elif inside:
            pending += " ".join(line.split())
            if pending.endswith("\\"):
                pending = pending[:-1].rstrip() + " "
            else:
                yield pending
                pending = ""


def documented_commands() -> list[Documented]:
    found = []
    for doc in DOCS:
        for line in fenced_lines((REPO / doc).read_text()):
            line = COMMENT.sub("", line.removeprefix("$ ")).strip()
            if line.startswith("tenter "):
                tail = SHELL_TAIL.search(line)
                command = line[: tail.start()] if tail else line
                found.append(Documented(doc, command, tail[1] if tail else ""))
    return found


COMMANDS = documented_commands()
RUN = [c for c in COMMANDS if c.line not in EXCLUDED]


def variants(line: str, job_id: str) -> list[list[str]]:
    """The argvs a documented line stands for: its ``[optional]`` groups all dropped and all
    kept, each ``a|b`` alternative its own, ``...`` left out, the placeholders made real."""
    groups = re.compile(r"\s*\[([^\]]*)\]")
    forms = {groups.sub("", line), groups.sub(r" \1", line)}
    argvs = []
    for form in sorted(forms):
        words = [w for w in shlex.split(form) if w != "..."]
        choices = [w.split("|") if "|" in w else [w] for w in words]
        for argv in itertools.product(*choices):
            argvs.append([{"JOB": job_id, "IMAGE": IMAGE}.get(w, w) for w in argv])
    return argvs


def doc_spec(doc: str) -> str:
    """The doc's own job spec (its first YAML block with an entry point), else a tiny one."""
    blocks = re.findall(r"```ya?ml\n(.*?)```", (REPO / doc).read_text(), re.S)
    return next((b for b in blocks if "entry_point:" in b), TINY_SPEC)


def make_workdir(folder: Path, spec: str) -> Path:
    """What the docs' commands name, in ``folder``: train.py, job.yaml (and the folders its
    channels name), the digits example, logs for `perf compare`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text(TRAIN)
    (folder / "job.yaml").write_text(spec)
    for channel in (yaml.safe_load(spec).get("channels") or {}).values():
        (folder / channel).mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "examples" / "digits", folder / "examples" / "digits")
    for name, data in PERF_LOGS.items():
        shutil.copy(REPO / "tests" / "perf" / "data" / data, folder / name)
    return folder


@pytest.fixture(scope="module")
def finished_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A tiny job that ran to its end, once for the module: its TENTER_HOME and its id."""
    root = tmp_path_factory.mktemp("finished-job")
    home = root / "tenter-home"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TENTER_HOME", str(home))
        done = tenter("run", "job.yaml", cwd=make_workdir(root / "work", TINY_SPEC))
    assert done.returncode == 0, done.stderr
    (job_dir,) = job_dirs(home / "jobs")
    return home, job_dir.name


def test_every_documented_command_is_run_or_excluded_with_its_reason() -> None:
    lines = [c.line for c in COMMANDS]
    assert len(lines) >= 35  # 39 when this was written
    assert [line for line in EXCLUDED if line not in lines] == []  # none stale
    unknown = [line for line in lines if line not in EXCLUDED and line.split()[1] not in CHECKS]
    assert unknown == [], "add a check for these commands, or exclude them with a reason"


@pytest.mark.parametrize(("why", "covered_by"), EXCLUDED.values())
def test_each_excluded_command_names_a_test_that_covers_it(why: str, covered_by: str) -> None:
    path, name = covered_by.split("::")
    assert f"def {name}(" in (REPO / path).read_text(), why


def no_traceback(done: Finished) -> Finished:
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    return done


def plan_json(args: list[str], cwd: Path) -> dict[str, object] | list[object]:
    """``tenter plan --json ARGS``, as the docs' `tenter run ARGS` would start it."""
    done = no_traceback(tenter("plan", "--json", *args, cwd=cwd))
    assert done.returncode == 0, done.stderr
    plan: dict[str, object] | list[object] = json.loads(done.stdout)
    return plan


def assert_size(
    plan: dict[str, object] | list[object], hosts: str | None, procs: str | None
) -> None:
    """The plan is of the size the flags ask for (a Kubernetes plan is its manifests)."""
    if isinstance(plan, dict):
        assert hosts is None or len(plan["hosts"]) == int(hosts)  # type: ignore[arg-type]
        assert procs is None or plan["procs_per_host"] == int(procs)


def parse(argv: list[str]) -> argparse.Namespace:
    """The arguments of a command that is not run as written: every flag as the docs spell it."""
    try:
        return build_parser().parse_args(argv[1:])
    except SystemExit:
        pytest.fail(f"`{shlex.join(argv)}` is refused")


def check_run(argv: list[str], cwd: Path, sink: str) -> None:
    parsed = parse(argv)  # run's own flags too, which plan has not
    plan = plan_json([a for a in argv[2:] if a not in RUN_ONLY_FLAGS], cwd)
    assert_size(plan, parsed.hosts and str(parsed.hosts), parsed.procs_per_host)


def check_scale(argv: list[str], cwd: Path, sink: str) -> None:
    """Each size the study would run, planned."""
    parsed = parse(argv)
    epochs = [] if parsed.epochs is None else ["--hp", f"epochs={parsed.epochs}"]
    for hosts, procs in itertools.product(
        (parsed.hosts or "").split(","), (parsed.procs_per_host or "").split(",")
    ):
        size = [
            *(["--hosts", hosts] if hosts else []),
            *(["--procs-per-host", procs] if procs else []),
        ]
        plan = plan_json([parsed.spec, *size, *epochs], cwd)
        assert_size(plan, hosts or None, procs or None)


ON_THE_FINISHED_JOB = {
    "status": ": SUCCEEDED (backend local)",
    "logs": "[algo-1,0]<stdout>: args []",
    "cancel": "is not running; it ended:\njob ",
}
"""What the verbs that take a job say of the finished one."""


def check_as_written(argv: list[str], cwd: Path, sink: str) -> None:
    done = no_traceback(tenter(*argv[1:], cwd=cwd))
    verb = argv[1]
    if verb == "doctor" and done.returncode == 1:  # documented: a check of this host failed
        assert re.search(r"\bfail\b", done.stdout), done.stdout
    else:
        assert done.returncode == 0, done.stdout + done.stderr
    assert (done.stdout + done.stderr).strip()
    assert ON_THE_FINISHED_JOB.get(verb, "") in done.stdout
    if sink:  # kubectl apply -f -, or a .yaml file: Kubernetes objects, as YAML
        assert all("kind" in d for d in yaml.safe_load_all(done.stdout) if d), done.stdout


CHECKS = {
    "run": check_run,
    "scale": check_scale,
    **dict.fromkeys(
        ("plan", "doctor", "container", "k8s", "perf", "status", "logs", "cancel", "report"),
        check_as_written,
    ),
}
"""How each verb's commands are checked: run as `tenter plan --json`, or as written."""


@pytest.mark.parametrize("command", RUN, ids=[f"{c.doc}: {c.line}" for c in RUN])
def test_documented_command_runs_as_written(
    command: Documented,
    finished_job: tuple[Path, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home, job_id = finished_job
    if "JOB" in command.line.split():
        monkeypatch.setenv("TENTER_HOME", str(home))
    for index, argv in enumerate(variants(command.line, job_id)):
        cwd = make_workdir(tmp_path / f"variant-{index}", doc_spec(command.doc))
        CHECKS[argv[1]](argv, cwd, command.sink)
