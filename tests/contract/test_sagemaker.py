from __future__ import annotations

from tenter.contract.sagemaker import hyperparameter_args, hyperparameters_json


def test_hyperparameter_args_are_sorted_and_strings_pass_verbatim() -> None:
    hostile = "x; $(rm -rf /) 'q'"
    assert hyperparameter_args({"b": hostile, "a": 1, "c": [1, 2], "d": False}) == [
        "--a",
        "1",
        "--b",
        hostile,
        "--c",
        "[1, 2]",
        "--d",
        "False",
    ]


def test_hyperparameters_json_holds_json_encoded_strings_like_sagemaker() -> None:
    assert hyperparameters_json({"lr": 0.1, "name": "x"}) == {"lr": "0.1", "name": '"x"'}
