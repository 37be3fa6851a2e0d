"""The pydantic base every spec model shares: unknown keys are errors, values are frozen."""

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Rejects unknown keys (SageMaker silently ignores ``process_per_host``; we refuse it)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
