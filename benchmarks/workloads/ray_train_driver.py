"""Ray Train's side of benchmarks/ray_vs_train.py: ray_ddp.py's loop through Ray Train's
``TorchTrainer`` on a running cluster, as a user's driver script would, in a process of its
own (as ``tenter run`` is one):

    python ray_train_driver.py ADDRESS STORAGE_DIR CONFIG_JSON HOSTS WORKERS_PER_HOST

Ray's defaults otherwise (its worker health check every 2 s, among them).
"""

from __future__ import annotations

import json
import logging
import sys

import ray
import ray.cloudpickle
import ray_ddp
from ray.train import FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer


def main(address: str, storage: str, config: str, hosts: int, per_host: int) -> None:
    # The loop travels to the workers by value: nothing to add to their import path.
    ray.cloudpickle.register_pickle_by_value(ray_ddp)  # type: ignore[no-untyped-call]
    ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    trainer = TorchTrainer(
        ray_ddp.ray_train_loop,
        train_loop_config=json.loads(config),
        torch_config=TorchConfig(backend="gloo"),
        # Each node offers `per_host` CPUs: PACK (the default) fills one, then the next.
        scaling_config=ScalingConfig(num_workers=hosts * per_host, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(storage_path=storage, failure_config=FailureConfig(max_failures=1)),
    )
    trainer.fit()


if __name__ == "__main__":
    address, storage, config, hosts, per_host = sys.argv[1:]
    main(address, storage, config, int(hosts), int(per_host))
