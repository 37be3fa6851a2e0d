"""The worker contract and the plan: what every process of a job sees, built once from the spec
for every backend (:mod:`~tenter.contract.worker`), and the per-host, per-rank plan the agent-based
backends execute (:mod:`~tenter.contract.plan`). Pure functions; torch-free."""
