"""tenter's per-host agent: one host of a job, on torch's public elastic API only.

- :mod:`~tenter.launch.agent.main`: the command line, and the warm template forked after
  torch's import;
- :mod:`~tenter.launch.agent.run`: the stop signals and the run (the manual);
- :mod:`~tenter.launch.agent.host`: the state machine (rendezvous, run, restart, finish);
- :mod:`~tenter.launch.agent.rendezvous`: a rendezvous round through torch's handler, and the
  workers' store, bound to the host's address;
- :mod:`~tenter.launch.agent.entries`: each worker as it is started (its environment composed
  by :func:`tenter.contract.torchrun.worker_env`), the round's events, kill requests;
- :mod:`~tenter.launch.agent.workers`: starting, watching and stopping the workers;
- :mod:`~tenter.jobdir.agent_result`: the report the launcher reads (the job directory's).

It replaces a subclass of torch's ``LocalElasticAgent`` that reached into eleven private torch
names: any torch release could break it (torch 2.5-2.11 did). What torch's agent did and
tenter needs is a few hundred lines here; the rendezvous stays torch's.
"""

from __future__ import annotations

from tenter.launch.agent.main import main

__all__ = ["main"]
