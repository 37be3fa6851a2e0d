"""The pydantic base every spec model shares: unknown keys are errors, values are frozen,
and a value of the wrong type is refused rather than converted."""

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from tenter.spec.limits import MAX_SECONDS


class StrictModel(BaseModel):
    """Rejects unknown keys (SageMaker silently ignores ``process_per_host``; we refuse it)
    and converts no types: pydantic's default would run ``instance_count: true`` as 1 and
    ``enabled: "no"`` as False, where a YAML slip is more likely than intent."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, strict=True)


Seconds = Annotated[int, Field(gt=0, le=MAX_SECONDS)]
"""A duration: positive, and at most SageMaker's 28-day limit on a job (a larger value
overflows the timers that wait on it)."""
