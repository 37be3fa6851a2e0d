"""Where a job's time went: the goodput ledger (:mod:`~tenter.goodput.ledger`, a pure
function of the job's records, which :mod:`~tenter.goodput.keeper` reads from the job
directory) and the stragglers (:mod:`~tenter.goodput.stragglers`). Torch-free: the launcher,
``tenter status`` and the ranks themselves use it. See docs/goodput.md.
"""
