"""Records how this worker process started, in ``$TENTER_JOB_DIR/start/<stdout file name>.json``:
environment, cwd, temporary directory, argv, sys.path[0], standard streams, signal dispositions,
session, parent-death signal, pid, and whether it ran from a warm spare. On the first attempt
rank 1 SIGKILLs itself after a barrier (to be restarted); with RELEASE_FILE set, rank 0 of the
first attempt instead says "ready" and exits with status 3 once that file exists (the test
decides when)."""

import ctypes
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import torch.distributed as dist

attempt, rank = os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["RANK"]
prctl, pdeathsig = ctypes.CDLL(None).prctl, ctypes.c_int()
prctl(2, ctypes.byref(pdeathsig), 0, 0, 0)  # PR_GET_PDEATHSIG
record = {
    "env": dict(os.environ),
    "cwd": os.getcwd(),
    "tempdir": tempfile.gettempdir(),
    "argv": sys.argv,
    "path0": sys.path[0],
    "streams": [os.readlink(f"/proc/self/fd/{fd}") for fd in (0, 1, 2)],
    "signals": {
        s.name: str(signal.getsignal(s))
        for s in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}
        if isinstance(s, signal.Signals)
    },
    "session_leader": os.getsid(0) == os.getpid(),
    "pdeathsig": pdeathsig.value,
    "main": __name__,
    # Forked from a template (titled ``... bootstrap --warm ...``), not started by the agent.
    "warm": "--warm" in Path(f"/proc/{os.getppid()}/cmdline").read_text(),
    "pid": os.getpid(),
}
out = Path(os.environ["TENTER_JOB_DIR"]) / "start"
out.mkdir(exist_ok=True)
(out / f"{os.path.basename(record['streams'][1])}.json").write_text(json.dumps(record))
print(f"attempt {attempt} rank {rank} warm {record['warm']}", flush=True)
release = os.environ.get("RELEASE_FILE")
if release and attempt == "0":
    if rank == "0":
        print("ready", flush=True)
        while not Path(release).exists():
            time.sleep(0.1)  # the job's own pace, not a synchronisation
        sys.exit(3)
    sys.exit(0)
dist.init_process_group("gloo")
dist.barrier()
if attempt == "0" and rank == "1":
    os.kill(os.getpid(), signal.SIGKILL)
dist.barrier()
dist.destroy_process_group()
