"""Every `tenter run` / `tenter plan` command line that README.md and docs/launch.md show
works as they say (issue 24: `tenter run job.yaml -- --seed 1` was refused). Each runs
through `tenter plan --json` (what `run` would start, without the wait); one runs for real."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tests.conftest import REPO, tenter

TRAIN = "import sys\nprint('args', sys.argv[1:])\n"
JOB = "entry_point: train.py\ninstance_count: 1\nprocesses_per_host: 1\n"

# (the command line as the docs write it, the script's arguments, hosts, processes per host)
FORMS = [
    ("tenter run --hosts 2 --procs-per-host 4 train.py -- --epochs 3 --lr 0.1",
     ["--epochs", "3", "--lr", "0.1"], 2, 4),
    ("tenter run job.yaml", [], 1, 1),
    ("tenter run job.yaml --hosts 4 -- --seed 1", ["--seed", "1"], 4, 1),
    ("tenter run job.yaml -- --seed 1", ["--seed", "1"], 1, 1),
    ("tenter run train.py -- --seed 1", ["--seed", "1"], 1, 1),
    ("tenter plan job.yaml", [], 1, 1),
    ("tenter plan --json job.yaml", [], 1, 1),
    # docs/launch.md: torchrun's command lines, `torchrun` replaced by `tenter run`.
    ("tenter run --nproc_per_node 2 train.py --epochs 3", ["--epochs", "3"], 1, 2),
    ("tenter run --nnodes 2 --nproc-per-node 1 -m train --seed 1", ["--seed", "1"], 2, 1),
]  # fmt: skip


def test_every_form_the_readme_shows_is_tested() -> None:
    readme = (REPO / "README.md").read_text().splitlines()
    shown = [line.split(" #")[0].strip() for line in readme]
    shown = [line for line in shown if line.startswith(("tenter run ", "tenter plan "))]
    assert len(shown) >= 4
    assert [line for line in shown if line not in {form for form, *_ in FORMS}] == []


@pytest.mark.parametrize(("form", "script_args", "hosts", "procs"), FORMS, ids=lambda f: str(f))
def test_each_documented_form_plans_what_the_docs_say(
    tmp_path: Path, form: str, script_args: list[str], hosts: int, procs: int
) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "job.yaml").write_text(JOB)
    args = shlex.split(form)[2:]  # without `tenter run` / `tenter plan`
    as_plan = ["plan", *([] if "--json" in args else ["--json"]), *args]
    done = tenter(*as_plan, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    command = plan["command"]
    entry = command[command.index("tenter.runtime.bootstrap") + 1 :]
    script, given = (entry[:2], entry[2:]) if entry[0] == "-m" else (entry[:1], entry[1:])
    assert script == ["-m", "train"] or Path(script[0]) == tmp_path / "train.py"
    assert given == script_args
    assert (len(plan["hosts"]), plan["procs_per_host"]) == (hosts, procs)


@pytest.mark.slow
def test_script_arguments_after_a_spec_file_reach_the_script(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "job.yaml").write_text(JOB)
    done = tenter("run", "job.yaml", "--", "--seed", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "[algo-1,0]<stdout>: args ['--seed', '1']" in done.stdout
