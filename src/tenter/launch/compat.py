"""What tenter's launcher needs from torch that differs between the torch versions it supports.

Each entry names the torch versions that need it: dropping a version means deleting lines here.

Nothing else is needed by the host agent (:mod:`tenter.launch.agent`): every supported torch
has the same public elastic API for it (``RendezvousHandler.next_rendezvous`` returns a
``RendezvousInfo`` since 2.4; it returned a tuple before, which no supported torch does).
"""

from __future__ import annotations

import torch

TCPSTORE_LIBUV_TAKES_LISTEN_FD = torch.__version__ >= "2.8"  # [torch 2.7]
"""torch 2.7: the libuv TCPStore server ignores ``master_listen_fd`` (it never listens on it;
fixed by pytorch/pytorch#150215 in 2.8), so a store serving an already-bound socket uses
the classic backend there (which always could)."""
