from __future__ import annotations

import pytest

from tenter.spec.mpi_options import MpiOptions, parse_mpi_options


def test_parse_splits_mca_env_and_other_flags() -> None:
    opts = parse_mpi_options(
        "--mca btl_tcp_if_include eth0 -x NCCL_DEBUG=INFO -x PATH --bind-to none"
    )
    assert opts.mca == {"btl_tcp_if_include": "eth0"}
    assert opts.env == {"NCCL_DEBUG": "INFO", "PATH": None}
    assert opts.other == ("--bind-to", "none")


def test_users_value_replaces_the_default_instead_of_repeating_it() -> None:
    defaults = MpiOptions(
        mca={"btl_vader_single_copy_mechanism": "none", "orte_abort_on_non_zero_status": "1"},
        env={"NCCL_DEBUG": "WARN"},
    )
    user = parse_mpi_options("--mca btl_vader_single_copy_mechanism cma -x NCCL_DEBUG=INFO")
    args = user.merged_over(defaults).to_args()
    assert args == [
        "--mca",
        "btl_vader_single_copy_mechanism",
        "cma",
        "--mca",
        "orte_abort_on_non_zero_status",
        "1",
        "-x",
        "NCCL_DEBUG=INFO",
    ]
    assert args.count("btl_vader_single_copy_mechanism") == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("--mca btl", "'--mca' needs a parameter name and a value"),
        ("-x", "'-x' needs a variable"),
        ("-x 1BAD=2", "'1BAD' is not a variable name"),
        ("--mca a 1 --mca a 2", "MCA parameter 'a' is given twice ('1' and '2')"),
        ("-x 'unclosed", "cannot be split into arguments"),
    ],
)
def test_parse_raises_a_clear_error_if_options_are_malformed(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_mpi_options(text)
