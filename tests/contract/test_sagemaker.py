from __future__ import annotations

from tenter.contract.sagemaker import hyperparameter_args, hyperparameters_json


def test_hyperparameter_args_are_sorted_and_strings_pass_verbatim() -> None:
    # One-letter names get one dash, as sagemaker-training's to_cmd_args gives them
    # (tests/sagemaker_user checks the toolkit's own output).
    hostile = "x; $(rm -rf /) 'q'"
    assert hyperparameter_args({"b": hostile, "a": 1, "cc": [1, "x"], "d": False}) == [
        "-a",
        "1",
        "-b",
        hostile,
        "--cc",
        "[1, 'x']",
        "-d",
        "False",
    ]


def test_hyperparameters_json_holds_json_encoded_strings_like_sagemaker() -> None:
    assert hyperparameters_json({"lr": 0.1, "name": "x"}) == {"lr": "0.1", "name": '"x"'}
