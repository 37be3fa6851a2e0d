"""``custom_mpi_options``: parse, validate, and merge with tenter's own mpirun defaults.

SageMaker appends the user's string to its own flags, so repeating a parameter it
already sets (``--mca btl_vader_single_copy_mechanism none``) makes mpirun fail with an
obscure message, and its defaults cannot be removed. tenter parses the string into MCA
parameters, ``-x`` variables and other flags; the user's value for a parameter or variable
replaces the default instead of repeating it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from tenter.spec.errors import FieldError

_MCA_FLAGS = ("--mca", "-mca")
_ENV_FLAG = "-x"


@dataclass(frozen=True)
class MpiOptions:
    """mpirun options, structured so that they can be merged without duplicates."""

    mca: dict[str, str] = field(default_factory=dict)
    env: dict[str, str | None] = field(default_factory=dict)
    """``-x NAME`` (value None: forward the launcher's) or ``-x NAME=VALUE``."""
    other: tuple[str, ...] = ()

    def merged_over(self, defaults: MpiOptions) -> MpiOptions:
        """These options (the user's) over ``defaults`` (tenter's): the user's value wins."""
        return MpiOptions(
            mca={**defaults.mca, **self.mca},
            env={**defaults.env, **self.env},
            other=(*defaults.other, *self.other),
        )

    def to_args(self) -> list[str]:
        args: list[str] = []
        for name, value in self.mca.items():
            args += ["--mca", name, value]
        for name, env_value in self.env.items():
            args += [_ENV_FLAG, name if env_value is None else f"{name}={env_value}"]
        return [*args, *self.other]


def parse_mpi_options(text: str) -> MpiOptions:
    """Parse a ``custom_mpi_options`` string. Raises FieldError saying what is malformed."""
    try:
        tokens = shlex.split(text)
    except ValueError as e:
        raise FieldError(f"cannot be split into arguments ({e})", "check the quotes") from e
    mca: dict[str, str] = {}
    env: dict[str, str | None] = {}
    other: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token in _MCA_FLAGS:
            if len(tokens) - i < 3:
                raise FieldError(
                    f"'{token}' needs a parameter name and a value", f"write '{token} NAME VALUE'"
                )
            name, value = tokens[i + 1], tokens[i + 2]
            if name in mca and mca[name] != value:
                raise FieldError(
                    f"MCA parameter '{name}' is given twice ('{mca[name]}' and '{value}')",
                    "keep one",
                )
            mca[name] = value
            i += 3
        elif token == _ENV_FLAG:
            if i + 1 >= len(tokens):
                raise FieldError("'-x' needs a variable", "write '-x NAME' or '-x NAME=VALUE'")
            name, sep, env_value = tokens[i + 1].partition("=")
            if not name.isidentifier():
                raise FieldError(
                    f"'-x {tokens[i + 1]}': '{name}' is not a variable name",
                    "use letters, digits and '_', not starting with a digit",
                )
            env[name] = env_value if sep else None
            i += 2
        else:
            other.append(token)
            i += 1
    return MpiOptions(mca=mca, env=env, other=tuple(other))
