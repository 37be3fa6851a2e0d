"""Observability: what a training script reports, what the launcher shows and records.

- :mod:`tenter.monitor.reporter`: ``tenter.report(step=..., samples=..., loss=...)``, called by
  the training script; each rank appends its samples to ``<job_dir>/metrics/rank-N.jsonl``.
- :mod:`tenter.monitor.live`: :class:`~tenter.monitor.live.LiveView`, the launcher's view of
  every rank (progress, throughput, CPU, memory, GPU), written to ``<job_dir>/metrics.jsonl``.
- :mod:`tenter.monitor.prometheus`: the same, served to Prometheus (``--metrics-port``).
- :mod:`tenter.monitor.job_report`: ``tenter report JOB``, plots and a Markdown page.
- :mod:`tenter.monitor.scaling`: ``tenter scale``, one job at several sizes.

See docs/monitor.md.
"""
