"""Imported by a spare in a test: creates a temporary directory at import that only ``atexit``
removes, as torch 2.7's ``torch.distributed.nn.jit.instantiator`` does (imported with
``torch.distributed.checkpoint``), then says so on stdout."""

import atexit
import shutil
import tempfile

PATH = tempfile.mkdtemp()
atexit.register(shutil.rmtree, PATH, True)
print(f"made {PATH}", flush=True)
