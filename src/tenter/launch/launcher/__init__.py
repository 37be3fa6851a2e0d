"""The on-machine launcher: its loop (the Supervisor) and watchers, detached launchers, preemption,
the output directory, torchft's lighthouse, isolated hosts in network namespaces."""
