"""The one place the doctor reads the machine from.

Every file the checks read (``/dev``, ``/sys``, ``/proc``, ``/etc``, libraries, executables
on ``PATH``) is read under :attr:`System.root`, and every environment variable from
:attr:`System.env`. Tests point ``root`` at a fake tree (``tests/doctor/fixtures/<host>/``)
and pass the few facts no file holds (torch's build, network interfaces, name resolution)
as arguments; left out, those are probed on this machine.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import importlib
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

# Where the dynamic loader looks after LD_LIBRARY_PATH and /etc/ld.so.conf (ld.so(8)).
DEFAULT_LIBRARY_DIRS = (
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
)
COMMAND_TIMEOUT_S = 20.0
_MOUNT_SIZE = re.compile(r"(?:^|,)size=(\d+)([kmg]?)(?:,|$)", re.IGNORECASE)
_LIMIT_LINE = re.compile(r"^(Max [A-Za-z ]+?)\s{2,}(\S+)\s+(\S+)")
_NCCL_FILE_VERSION = re.compile(r"libnccl\.so\.(\d+\.\d+\.\d+)$")
# NCCL compiles "NCCL version <x.y.z>+cuda<a.b>" into the library as one literal (init.cc
# VERSION_STRING), so the version of a libnccl.so.2 without a versioned name is still readable.
_NCCL_EMBEDDED_VERSION = re.compile(rb"NCCL version (\d+\.\d+\.\d+)")


@dataclass(frozen=True)
class TorchBuild:
    """What the installed torch was built with; None where it was built without it."""

    version: str | None
    cuda: str | None = None
    cudnn: str | None = None
    nccl: str | None = None


@dataclass(frozen=True)
class Interface:
    name: str
    up: bool
    ipv4: tuple[str, ...] = ()

    @property
    def loopback(self) -> bool:
        return self.name == "lo" or (
            bool(self.ipv4) and all(a.startswith("127.") for a in self.ipv4)
        )


@dataclass(frozen=True)
class CommandOutput:
    returncode: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class Limit:
    soft: int | None
    """None: unlimited."""
    hard: int | None


def _cudnn_version(code: int) -> str:
    # cuDNN 9 encodes major*10000 + minor*100 + patch; cuDNN 8 major*1000 + minor*100 + patch.
    major, rest = divmod(code, 10000) if code >= 90000 else divmod(code, 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


@functools.cache
def probe_torch() -> TorchBuild:
    """The installed torch's build (imports torch: about a second, once per process)."""
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return TorchBuild(version=None)
    cuda: str | None = torch.version.cuda
    cudnn_code = torch.backends.cudnn.version() if cuda else None
    nccl = ".".join(str(p) for p in torch.cuda.nccl.version()) if cuda else None
    return TorchBuild(
        version=str(torch.__version__),
        cuda=cuda,
        cudnn=_cudnn_version(int(cudnn_code)) if cudnn_code else None,
        nccl=nccl,
    )


def probe_interfaces() -> list[Interface]:
    stats = psutil.net_if_stats()
    out = []
    # Kernel order (getifaddrs), the order NCCL walks them in.
    for name, addrs in psutil.net_if_addrs().items():
        ipv4 = tuple(a.address for a in addrs if a.family == socket.AF_INET)
        out.append(Interface(name, up=name in stats and stats[name].isup, ipv4=ipv4))
    return out


def resolve_host(name: str) -> list[str]:
    """The IPv4 addresses ``name`` resolves to (empty when it does not)."""
    try:
        infos = socket.getaddrinfo(name, None, family=socket.AF_INET)
    except (socket.gaierror, UnicodeError):
        return []
    return sorted({str(info[4][0]) for info in infos})


def _probe_nvml_gpus() -> list[str] | None:
    """GPU models from NVML (nvidia-ml-py), or None when it is not installed or has no driver."""
    try:
        pynvml = importlib.import_module("pynvml")
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        count = pynvml.nvmlDeviceGetCount()
        return [
            str(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)))
            for i in range(count)
        ]
    finally:
        pynvml.nvmlShutdown()


class System:
    """One host as the checks see it: files under ``root``, variables from ``env``."""

    def __init__(
        self,
        root: Path = Path("/"),
        env: Mapping[str, str] | None = None,
        *,
        torch: TorchBuild | None = None,
        interfaces: list[Interface] | None = None,
        hostname: str | None = None,
        resolve: Callable[[str], list[str]] | None = None,
        python_path: Sequence[str] | None = None,
    ) -> None:
        self.root = root
        self.env: Mapping[str, str] = dict(os.environ if env is None else env)
        self.python_path = list(sys.path if python_path is None else python_path)
        """Where Python looks for packages (this process's ``sys.path`` unless given):
        torch loads the CUDA libraries of pip's ``nvidia-*`` packages from there."""
        self._torch = torch
        self._interfaces = interfaces
        self.hostname = hostname or socket.gethostname()
        self.resolve = resolve or resolve_host

    @property
    def is_live(self) -> bool:
        """The machine itself, not a fake tree: probes that bypass files (NVML) may run."""
        return self.root == Path("/")

    def path(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def display(self, path: Path) -> str:
        """``path`` (under the root) as this host's processes see it."""
        return "/" + path.relative_to(self.root).as_posix().removeprefix("/")

    def read(self, path: str) -> str | None:
        try:
            return self.path(path).read_text(errors="replace")
        except OSError:
            return None

    def glob(self, pattern: str) -> list[Path]:
        """Paths under the root matching an absolute ``pattern``, sorted."""
        return sorted(Path(p) for p in glob.glob(str(self.path(pattern))))

    def which(self, name: str) -> Path | None:
        for directory in self.env.get("PATH", "").split(os.pathsep):
            candidate = self.path(directory) / name
            if directory and candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
        return None

    def run(self, argv: list[str], *, unset: tuple[str, ...] = ()) -> CommandOutput | None:
        """Run an executable found on this system's PATH; None when it is not there.

        ``unset`` removes variables that would change what the command reports (fi_info
        lists only FI_PROVIDER's provider when it is set).
        """
        exe = self.which(argv[0])
        if exe is None:
            return None
        env = {k: v for k, v in self.env.items() if k not in unset}
        try:
            proc = subprocess.run(
                [str(exe), *argv[1:]],
                capture_output=True,
                text=True,
                env=env,
                timeout=COMMAND_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return CommandOutput(124, "", f"{argv[0]} did not answer in {COMMAND_TIMEOUT_S:.0f} s")
        except OSError as e:
            return CommandOutput(126, "", f"{argv[0]} could not be started: {e.strerror}")
        return CommandOutput(proc.returncode, proc.stdout, proc.stderr)

    # --- the dynamic loader ---------------------------------------------------------------

    def _ld_so_conf(self, conf: str, seen: set[str]) -> list[str]:
        if conf in seen:
            return []
        seen.add(conf)
        dirs: list[str] = []
        for raw in (self.read(conf) or "").splitlines():
            line = raw.split("#", 1)[0].strip()
            if line.startswith("include "):
                for included in self.glob(line.removeprefix("include ").strip()):
                    dirs += self._ld_so_conf("/" + str(included.relative_to(self.root)), seen)
            elif line:
                dirs.append(line)
        return dirs

    def library_dirs(self) -> list[str]:
        """The loader's search order: LD_LIBRARY_PATH, /etc/ld.so.conf, the default dirs.

        This is ld.so's order for a library without RPATH; a library found earlier shadows
        a later one (the usual reason a process loads another NCCL than torch was built with).
        """
        dirs = [d for d in self.env.get("LD_LIBRARY_PATH", "").split(":") if d]
        dirs += self._ld_so_conf("/etc/ld.so.conf", set())
        dirs += DEFAULT_LIBRARY_DIRS
        return list(dict.fromkeys(os.path.normpath(d) for d in dirs))

    def find_libraries(self, pattern: str) -> list[Path]:
        """Files matching ``pattern`` (e.g. ``libnccl.so*``) in loader order."""
        found: list[Path] = []
        for directory in self.library_dirs():
            found += [p for p in self.glob(f"{directory}/{pattern}") if p not in found]
        return found

    def nccl_version(self, library: Path) -> str | None:
        """The version of a libnccl file: from its versioned name, else its embedded string."""
        real = library.resolve()
        match = _NCCL_FILE_VERSION.search(real.name)
        if match:
            return match.group(1)
        try:
            with real.open("rb") as f:
                # libnccl is a few hundred MB: read it in chunks, overlapping by the length
                # of a match so that none is cut in two.
                tail = b""
                while chunk := f.read(16 * 2**20):
                    found = _NCCL_EMBEDDED_VERSION.search(tail + chunk)
                    if found:
                        return found.group(1).decode()
                    tail = chunk[-64:]
        except OSError:
            return None
        return None

    # --- kernel views ----------------------------------------------------------------------

    def limits(self) -> dict[str, Limit]:
        """``/proc/self/limits``: the limits this process (and so the job it starts) has."""
        out = {}
        for line in (self.read("/proc/self/limits") or "").splitlines()[1:]:
            match = _LIMIT_LINE.match(line)
            if match:
                soft, hard = (None if v == "unlimited" else int(v) for v in match.groups()[1:])
                out[match.group(1)] = Limit(soft, hard)
        return out

    def mount_size(self, mountpoint: str) -> int | None:
        """Size in bytes of the tmpfs at ``mountpoint``, from the mount table (the size a
        container was given with ``--shm-size``), else from statvfs; None if it is absent."""
        size = None
        for line in (self.read("/proc/self/mounts") or "").splitlines():
            fields = line.split()
            # The last mount of a point is the one in effect.
            if len(fields) >= 4 and fields[1] == mountpoint:
                match = _MOUNT_SIZE.search(fields[3])
                unit = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}
                size = int(match.group(1)) * unit[match.group(2).lower()] if match else None
        if size is None:
            with contextlib.suppress(OSError):
                stat = os.statvfs(self.path(mountpoint))
                size = stat.f_frsize * stat.f_blocks
        return size

    def gpus(self) -> list[str]:
        """Models of the GPUs this process can use (CUDA_VISIBLE_DEVICES applied).

        NVML when nvidia-ml-py is installed, else the driver's ``/proc/driver/nvidia/gpus``.
        """
        models = _probe_nvml_gpus() if self.is_live else None
        if models is None:
            models = []
            for info in self.glob("/proc/driver/nvidia/gpus/*/information"):
                text = info.read_text(errors="replace")
                match = re.search(r"^Model:\s*(.+)$", text, re.MULTILINE)
                models.append(match.group(1).strip() if match else "unknown GPU")
        visible = self.env.get("CUDA_VISIBLE_DEVICES")
        if visible is None:
            return models
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        if all(i.isdigit() for i in ids):
            return [models[int(i)] for i in ids if int(i) < len(models)]
        return models[: len(ids)]

    @property
    def torch(self) -> TorchBuild:
        return self._torch or probe_torch()

    def interfaces(self) -> list[Interface]:
        return probe_interfaces() if self._interfaces is None else self._interfaces
