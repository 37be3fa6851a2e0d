"""tenter data imagenet-val-reorg, on a tiny tree in ImageNet's real names and CSV format."""

from __future__ import annotations

from pathlib import Path

import pytest

from tenter.cli.main import main

LABELS = {
    "ILSVRC2012_val_00000001": "n01751748",
    "ILSVRC2012_val_00000002": "n09193705",
    "ILSVRC2012_val_00008726": "n02119789",
    "ILSVRC2012_val_00050000": "n02119789",
}


def make_val(root: Path) -> tuple[Path, Path]:
    val = root / "val"
    val.mkdir()
    for image_id in LABELS:
        (val / f"{image_id}.JPEG").write_bytes(image_id.encode())
    rows = [f"{i},{s} 255 142 454 329 {s} 44 21 322 295" for i, s in LABELS.items()]
    csv = root / "LOC_val_solution.csv"
    csv.write_text("ImageId,PredictionString\n" + "\n".join(rows) + "\n")
    return val, csv


def tree(val: Path) -> set[str]:
    return {str(p.relative_to(val)) for p in val.rglob("*") if p.is_file()}


def test_reorg_moves_each_image_into_its_class_folder_and_is_idempotent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    val, csv = make_val(tmp_path)
    assert main(["data", "imagenet-val-reorg", str(val), str(csv)]) == 0
    assert "moved 4 images into 3 class folders (0 already in place)" in capsys.readouterr().out
    assert tree(val) == {f"{s}/{i}.JPEG" for i, s in LABELS.items()}
    assert (
        val / "n02119789/ILSVRC2012_val_00008726.JPEG"
    ).read_bytes() == b"ILSVRC2012_val_00008726"
    assert main(["data", "imagenet-val-reorg", str(val), str(csv)]) == 0
    assert "moved 0 images into 3 class folders (4 already in place)" in capsys.readouterr().out


def test_reorg_moves_nothing_if_dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    val, csv = make_val(tmp_path)
    before = tree(val)
    assert main(["data", "imagenet-val-reorg", str(val), str(csv), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"would move {val}/ILSVRC2012_val_00000001.JPEG -> {val}/n01751748/" in out
    assert "would move 4 images into 3 class folders" in out
    assert tree(val) == before


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("missing", "1 images listed in the CSV are not there: ILSVRC2012_val_00000002"),
        ("extra", "1 files are not listed in the CSV: ILSVRC2012_val_00000003.JPEG"),
        (
            "misplaced",
            "1 images are in another class's folder: n09193705/ILSVRC2012_val_000000"
            "01.JPEG (belongs in n01751748)",
        ),
    ],
)
def test_reorg_exits_2_and_moves_nothing_if_folder_and_csv_disagree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str, message: str
) -> None:
    val, csv = make_val(tmp_path)
    if damage == "missing":
        (val / "ILSVRC2012_val_00000002.JPEG").unlink()
    elif damage == "extra":
        (val / "ILSVRC2012_val_00000003.JPEG").write_bytes(b"")
    else:
        (val / "n09193705").mkdir()
        (val / "ILSVRC2012_val_00000001.JPEG").rename(
            val / "n09193705/ILSVRC2012_val_00000001.JPEG"
        )
    before = tree(val)
    assert main(["data", "imagenet-val-reorg", str(val), str(csv)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "does not match the CSV, nothing was moved" in err
    assert message in err
    assert tree(val) == before


@pytest.mark.parametrize(
    ("csv_text", "message"),
    [
        ("id,label\n", "the first line is 'id,label', not 'ImageId,PredictionString'"),
        (
            "ImageId,PredictionString\nILSVRC2012_val_00000001,dog 1 2 3 4\n",
            "line 2: 'ILSVRC2012_val_00000001,dog 1 2 3 4' is not",
        ),
    ],
)
def test_reorg_exits_2_naming_the_line_if_the_csv_is_malformed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], csv_text: str, message: str
) -> None:
    val, csv = make_val(tmp_path)
    csv.write_text(csv_text)
    assert main(["data", "imagenet-val-reorg", str(val), str(csv)]) == 2
    assert message in " ".join(capsys.readouterr().err.split())
