"""The agent's and the warm template's messages: each report reads back as it was sent, and
fits the receive buffer of the other side."""

from __future__ import annotations

import pytest

from tenter.runtime import warm_protocol as protocol


@pytest.mark.parametrize(
    "report",
    [protocol.Forked(4_194_304), protocol.Exited(4_194_304, -9), protocol.Exited(17, 255)],
)
def test_a_report_reads_back_as_sent_within_one_message(
    report: protocol.Forked | protocol.Exited,
) -> None:
    message = protocol.encode(report)
    assert protocol.decode(message) == report
    assert len(message) <= protocol.MAX_MESSAGE


def test_a_message_that_is_no_report_is_refused() -> None:
    with pytest.raises(ValueError, match="not a warm template's report"):
        protocol.decode(protocol.FORK)
