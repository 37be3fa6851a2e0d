"""``tenter perf``: nccl-tests' collective benchmark for any torch.distributed backend.

``tenter perf all_reduce -b 8 -e 128M -f 2 --hosts 2 --procs-per-host 2`` launches a job
whose ranks run ``python -m tenter.perf``; that worker also runs under a plain torchrun.
The output is nccl-tests' layout, so its readers and parsers read it; ``tenter perf
compare`` puts such logs (tenter's or nccl-tests') side by side. See docs/perf.md.

Layout: ``options`` (flags) and ``nccl_only`` (nccl-tests flags without a torch meaning),
``collectives`` (one small definition each), ``verifiable`` (exact test data), ``harness``
(sweep, check), ``timing`` (one row half's clock), ``resources`` (devices, memory),
``report`` (the table), ``results_json`` (nccl-tests' ``-J`` file, written and read),
``worker`` (the rank's entry point), ``parse`` and ``compare`` (reading logs).
"""
