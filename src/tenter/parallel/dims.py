"""``ParallelDims``: the validated parallel degrees of a job and the rank layout they imply.

Everything here except :attr:`ParallelDims.mesh` is pure arithmetic, testable on a laptop for
any world size: which mesh dimension is outermost (the placement), the coordinates of a rank,
the ranks of each pipeline. The mesh itself (torch's ``DeviceMesh``, one process group per
dimension) is built on first use, from the same order, so the pure layout and the live groups
cannot disagree.

Placement follows SageMaker model parallelism's ``placement_strategy``: a permutation of the
letters D (data), P (pipeline) and T (tensor) read from the outermost to the innermost
dimension, so the last letter's ranks are neighbours (consecutive ranks, the same host).
``cluster`` is ``DPT`` (a model replica on neighbouring ranks; data parallelism across hosts)
and ``spread`` is ``TPD`` (the data-parallel peers are neighbours; a pipeline spans hosts).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, fields

from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

PLACEMENT_ALIASES = {"cluster": "DPT", "spread": "TPD"}
PLACEMENTS = ("cluster", "spread", *("".join(p) for p in itertools.permutations("DPT")))
# D expands to two dimensions: replicas outside, shards inside, as HSDP wants them (a shard
# group is the smaller, more talkative one, so it gets the nearer ranks).
_LETTER_DIMS = {"D": ("dp_replicate", "dp_shard"), "P": ("pp",), "T": ("tp",)}
DEGREES = ("pp", "dp_replicate", "dp_shard", "tp")


def mesh_order(placement: str) -> tuple[str, ...]:
    """The mesh dimension names, outermost first, for a ``placement_strategy``."""
    letters = PLACEMENT_ALIASES.get(placement, placement)
    if sorted(letters) != ["D", "P", "T"]:
        raise ValueError(
            f"placement {placement!r} is not valid: use 'cluster', 'spread', or a permutation "
            "of the letters D, P and T such as 'DPT' or 'PDT'"
        )
    return tuple(dim for letter in letters for dim in _LETTER_DIMS[letter])


@dataclass(frozen=True)
class ParallelDims:
    """The degree of each parallelism. Their product is the world size; one degree may be
    ``-1``, meaning "whatever the others leave"."""

    world_size: int
    pp: int = 1
    """Pipeline stages (SMP ``pipeline_parallel_degree``)."""
    dp_replicate: int = -1
    """Data-parallel replicas that hold whole copies of their stage (or HSDP's outer dim)."""
    dp_shard: int = 1
    """Data-parallel ranks that shard their stage between them (FSDP2; SMP
    ``sharded_data_parallel_degree``)."""
    tp: int = 1
    """Tensor parallelism (SMP ``tensor_parallel_degree``), see ``tensor_parallel.py``."""
    placement: str = "cluster"
    """Which dimension's ranks are neighbours: see the module docstring."""
    device_type: str = "cpu"
    """The device type the mesh is built for (``cpu``: gloo, ``cuda``: NCCL)."""

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ValueError(f"world_size ({self.world_size}) must be at least 1")
        degrees = {name: getattr(self, name) for name in DEGREES}
        bad = {name: d for name, d in degrees.items() if d < 1 and d != -1}
        if bad:
            name, d = next(iter(bad.items()))
            raise ValueError(f"{name} ({d}) must be a positive degree, or -1 to infer it")
        unknown = [name for name, d in degrees.items() if d == -1]
        if len(unknown) > 1:
            raise ValueError(
                f"{' and '.join(unknown)} are all -1: at most one degree can be inferred"
            )
        known = math.prod(d for d in degrees.values() if d != -1)
        if unknown:
            if self.world_size % known:
                raise ValueError(self._arithmetic(f"does not leave a whole {unknown[0]}", known))
            object.__setattr__(self, unknown[0], self.world_size // known)
        elif known != self.world_size:
            raise ValueError(self._arithmetic("must equal the world size", known))
        mesh_order(self.placement)  # raises on a bad placement

    def _arithmetic(self, rule: str, known: int) -> str:
        shown = " x ".join(f"{n} {getattr(self, n)}" for n in DEGREES if getattr(self, n) != -1)
        return (
            f"the parallel degrees {shown} = {known} {rule} ({self.world_size}); "
            "change a degree or the number of processes"
        )

    @property
    def dp(self) -> int:
        """All data-parallel ranks of a stage: replicas x shards."""
        return self.dp_replicate * self.dp_shard

    @property
    def order(self) -> tuple[str, ...]:
        """Mesh dimension names, outermost first."""
        return mesh_order(self.placement)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(getattr(self, name) for name in self.order)

    def coords(self, rank: int) -> dict[str, int]:
        """The coordinate of ``rank`` along every dimension (row-major, as DeviceMesh lays
        out ``arange(world_size).reshape(shape)``)."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} is outside the world of {self.world_size} ranks")
        out: dict[str, int] = {}
        for name, size in reversed(list(zip(self.order, self.shape, strict=True))):
            out[name] = rank % size
            rank //= size
        return {name: out[name] for name in DEGREES}

    def groups(self, dim: str) -> list[list[int]]:
        """The ranks that share every coordinate but ``dim``: one process group each."""
        self._check_name(dim)
        by_rest: dict[tuple[int, ...], list[int]] = {}
        for rank in range(self.world_size):
            c = self.coords(rank)
            by_rest.setdefault(tuple(v for k, v in c.items() if k != dim), []).append(rank)
        return sorted(by_rest.values())

    def _check_name(self, name: str) -> None:
        if name not in DEGREES:
            raise ValueError(f"no mesh dimension {name!r}; the dimensions are {list(DEGREES)}")

    @functools.cached_property
    def mesh(self) -> DeviceMesh:
        """The device mesh, built on first use: needs the default process group
        (``tenter.init()``); every rank must build it (it creates process groups)."""
        return init_device_mesh(self.device_type, self.shape, mesh_dim_names=self.order)

    def get_mesh(self, name: str) -> DeviceMesh:
        """The 1-D mesh of dimension ``name`` that this rank belongs to."""
        self._check_name(name)
        return self.mesh[name]

    def get_optional_mesh(self, name: str) -> DeviceMesh | None:
        """Like :meth:`get_mesh`, but ``None`` when that parallelism is off (degree 1)."""
        self._check_name(name)
        return self.mesh[name] if getattr(self, name) > 1 else None

    def __str__(self) -> str:
        degrees = " x ".join(f"{n} {getattr(self, n)}" for n in self.order)
        return f"{degrees} = {self.world_size} ranks, placement {self.placement}"


def dims_of(mesh: DeviceMesh) -> ParallelDims:
    """The ParallelDims a mesh was built from (its names and sizes), for helpers that are
    handed only the mesh."""
    names = mesh.mesh_dim_names
    if names is None or sorted(names) != sorted(DEGREES):
        raise ValueError(
            f"the mesh has dimensions {names}; build it with tenter.parallel.mesh(), which "
            f"names {list(DEGREES)}"
        )
    sizes = dict(zip(names, mesh.shape, strict=True))
    placement = "".join(
        letter
        for name in names
        for letter, dims in _LETTER_DIMS.items()
        if name == dims[0]  # one letter per group of dimensions
    )
    placement = {letters: name for name, letters in PLACEMENT_ALIASES.items()}.get(
        placement, placement
    )
    kwargs = {f.name: sizes[f.name] for f in fields(ParallelDims) if f.name in sizes}
    return ParallelDims(
        world_size=mesh.size(), placement=placement, device_type=mesh.device_type, **kwargs
    )
