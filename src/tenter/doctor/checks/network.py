"""Network: which interface gloo and NCCL will use, the *_SOCKET_IFNAME settings, and name
resolution of every host of the job."""

from __future__ import annotations

from tenter.doctor.result import Check, CheckResult, Context
from tenter.doctor.system import Interface, System


def nccl_matches(ifname_setting: str, name: str) -> bool:
    """NCCL_SOCKET_IFNAME's rule: comma-separated prefixes; ``^`` excludes, ``=`` is exact."""
    exclude = ifname_setting.startswith("^")
    setting = ifname_setting.removeprefix("^")
    exact = setting.startswith("=")
    items = [i for i in setting.removeprefix("=").split(",") if i]
    hit = any(name == i if exact else name.startswith(i) for i in items)
    return hit != exclude


def nccl_interfaces(system: System) -> list[str]:
    """The interfaces NCCL's bootstrap and socket transport use, in NCCL's order of preference
    (src/misc/socket.cc ncclFindInterfaces): NCCL_SOCKET_IFNAME; else ib*; else anything but
    docker* and lo; else docker*; else lo."""
    usable = [i.name for i in system.interfaces() if i.ipv4]
    setting = system.env.get("NCCL_SOCKET_IFNAME")
    if setting:
        return [n for n in usable if nccl_matches(setting, n)]
    for rule in ("ib", "^docker,lo", "docker", "lo"):
        chosen = [n for n in usable if nccl_matches(rule, n)]
        if chosen:
            return chosen
    return []


def gloo_interfaces(system: System) -> tuple[list[str], str]:
    """The interfaces gloo binds to, and why (torch's ProcessGroupGloo createDefaultDevice):
    GLOO_SOCKET_IFNAME; else the local address the hostname resolves to; else loopback."""
    interfaces = system.interfaces()
    setting = system.env.get("GLOO_SOCKET_IFNAME")
    if setting:
        names = [n for n in setting.split(",") if n]
        return [i.name for i in interfaces if i.name in names], "GLOO_SOCKET_IFNAME"
    addrs = system.resolve(system.hostname)
    owners = [i.name for i in interfaces if set(i.ipv4) & set(addrs)]
    if owners:
        return owners[:1], f"hostname {system.hostname} -> {', '.join(addrs)}"
    loopback = [i.name for i in interfaces if i.loopback][:1]
    return loopback, f"hostname {system.hostname} resolves to no local address"


def _describe(interfaces: list[Interface]) -> str:
    return ", ".join(
        f"{i.name} {'/'.join(i.ipv4)}{'' if i.up else ' (down)'}" for i in interfaces if i.ipv4
    )


def _on_loopback(names: list[str], interfaces: list[Interface]) -> bool:
    return all(i.loopback for i in interfaces if i.name in names)


def _interfaces(ctx: Context) -> CheckResult:
    interfaces = ctx.system.interfaces()
    gloo, why = gloo_interfaces(ctx.system)
    nccl = nccl_interfaces(ctx.system)
    found = (
        f"{_describe(interfaces)}; gloo uses {','.join(gloo) or 'none'} ({why}), "
        f"NCCL uses {','.join(nccl) or 'none'}"
    )
    job = ctx.job
    if job is None or job.simulated or len(job.hosts) < 2:
        return CheckResult.ok(found)
    on_lo = [
        name
        for name, picked in (("gloo", gloo), ("NCCL", nccl))
        if _on_loopback(picked, interfaces)
    ]
    if on_lo:
        return CheckResult.warn(
            f"{found}: {' and '.join(on_lo)} would use loopback in a {len(job.hosts)}-host job",
            "set GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME to the interface the hosts share "
            "(e.g. eth0)",
        )
    return CheckResult.ok(found)


def _socket_ifname(ctx: Context) -> CheckResult:
    env = ctx.system.env
    names = [i.name for i in ctx.system.interfaces()]
    settings = {k: env[k] for k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME") if env.get(k)}
    if not settings:
        return CheckResult.ok("GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME not set")
    found = ", ".join(f"{k}={v}" for k, v in settings.items())
    gloo = [n for n in settings.get("GLOO_SOCKET_IFNAME", "").split(",") if n]
    missing = [n for n in gloo if n not in names]
    if missing:
        return CheckResult.fail(
            f"{found}: no interface {', '.join(missing)} on this host ({', '.join(names)})",
            "set GLOO_SOCKET_IFNAME to one of this host's interfaces",
        )
    nccl = nccl_interfaces(ctx.system)
    if "NCCL_SOCKET_IFNAME" in settings and not nccl:
        return CheckResult.fail(
            f"{found}: matches no interface with an address ({', '.join(names)})",
            "set NCCL_SOCKET_IFNAME to one of this host's interfaces (a prefix, ^ to exclude)",
        )
    if gloo and "NCCL_SOCKET_IFNAME" in settings and not set(gloo) & set(nccl):
        return CheckResult.warn(
            f"{found}: gloo uses {','.join(gloo)}, NCCL uses {','.join(nccl)}",
            "set both to the same interface so every collective takes one network",
        )
    return CheckResult.ok(found)


def _host_resolution(ctx: Context) -> CheckResult:
    system = ctx.system
    names = [system.hostname, *(ctx.job.hosts if ctx.job else ())]
    resolved = {name: system.resolve(name) for name in dict.fromkeys(names)}
    unresolved = [n for n, addrs in resolved.items() if not addrs]
    found = "; ".join(f"{n} -> {', '.join(a) or 'unresolved'}" for n, a in resolved.items())
    if unresolved:
        return CheckResult.fail(
            found,
            f"make {', '.join(unresolved)} resolvable on every host (DNS or /etc/hosts)",
        )
    job = ctx.job
    own = resolved[system.hostname]
    if job and not job.simulated and len(job.hosts) > 1 and all(a.startswith("127.") for a in own):
        return CheckResult.warn(
            f"{found}: this host's name resolves to loopback, unreachable from the others",
            f"map {system.hostname} to its network address in /etc/hosts, or set "
            "GLOO_SOCKET_IFNAME",
        )
    return CheckResult.ok(found)


INTERFACES = Check(
    "interfaces",
    "network interfaces, and which one gloo and NCCL will use",
    _interfaces,
    # Informational, and its loopback finding is a warning: it cannot stop a run.
    preflight=False,
)
SOCKET_IFNAME = Check(
    "socket-ifname",
    "GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME name interfaces of this host, the same one",
    _socket_ifname,
)
HOST_RESOLUTION = Check(
    "host-resolution",
    "this host's name and every host of the job resolve to an address",
    _host_resolution,
)
