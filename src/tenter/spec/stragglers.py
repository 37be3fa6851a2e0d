"""``stragglers``: when tenter names a rank persistently slower than the others
(tenter.goodput.stragglers; docs/goodput.md)::

stragglers: {window: 5, windows: 3, ratio: 1.15, min_excess_s: 0.01}   # the defaults
stragglers: {enabled: false}                                             # no detection
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from tenter.spec.base import StrictModel


class Stragglers(StrictModel):
    enabled: bool = True
    window: Annotated[int, Field(ge=2, le=10_000)] = 5
    """Steps per window; a rank's median busy time over the window is what counts."""
    windows: Annotated[int, Field(ge=1, le=1_000)] = 3
    """Consecutive slow windows before the rank is named."""
    ratio: Annotated[float, Field(gt=1.0, le=100.0)] = 1.15
    """A slow rank's median busy time is above this many times the other ranks' median."""
    min_excess_s: Annotated[float, Field(ge=0.0, le=3600.0)] = 0.01
    """... and above it by more than this many seconds per step."""
