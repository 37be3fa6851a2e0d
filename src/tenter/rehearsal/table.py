"""The rehearsal's table and its one-line form (``scale hosts=H ranks=R ...``)."""

from __future__ import annotations

from tenter.rehearsal.drive import Figures

TARGETS = {
    "first_step": ("launch -> every rank at its first step", 30.0),
    "kill": ("one rank killed -> every rank stepping again", 5.0),
    "kill_stopped": ("one rank killed -> the job stopped (mpi: no restart)", None),
    "host_lost": ("one host lost -> the rest stepping again", 5.0),
    "hang_named": ("one rank stopped -> the hang report naming it", None),
    "finished": ("the hang report -> the job's result (slurm: its stop)", None),
}
STEADY = {
    "launcher_core": ("launcher CPU (share of a core)", 0.25),
    "launcher_rss_mb": ("launcher process RSS (MB)", 1024.0),
    "job_dir_bytes_per_s": ("job directory bytes written per s", None),
    "job_dir_files_per_s": ("job directory files created per s", None),
    "live_view_s": ("one live-view refresh (s)", None),
    "live_view_cpu_s": ("one live-view refresh's CPU (s)", None),
    "ledger_stragglers_s": ("one ledger and straggler pass (s)", None),
    "ledger_stragglers_cpu_s": ("one ledger and straggler pass's CPU (s)", None),
    "status_s": ("tenter status (s)", 1.0),
    "status_cpu_s": ("tenter status's CPU (s)", None),
    "agent_core": ("an agent's CPU (share of a core, here; in a pack)", None),
    "light_pss_mb": ("PSS per light process (MB)", None),
}


def rows(figures: Figures, hang_timeout: float) -> list[tuple[str, str, str]]:
    """(what, measured, target) rows."""
    out = []
    for key, (what, target) in TARGETS.items():
        if key in figures.seconds:
            bound = hang_timeout + 5 if key == "hang_named" else target
            out.append(
                (what, f"{figures.seconds[key]:.2f} s", _target(figures.seconds[key], bound))
            )
    for key, (what, target) in STEADY.items():
        if key in figures.steady:
            out.append((what, f"{figures.steady[key]:.3g}", _target(figures.steady[key], target)))
    if figures.processes_per_host:
        out.append(("processes per host here", f"{figures.processes_per_host:.1f}", ""))
    if figures.root_cause:
        out.append(("the failure report", figures.root_cause, "names the killed rank: ok"))
    for phase, mean in figures.store_requests.items():
        worst = figures.store_requests_max.get(phase, 0)
        events = figures.event_requests(phase)
        measured = f"{mean:.1f} (max {worst}), {events:.1f} beyond the agents' polls"
        out.append((f"store requests per host: {phase}", measured, ""))
    for key, why in figures.skipped.items():
        what = TARGETS[key][0] if key in TARGETS else key.replace("_", " ")
        out.append((what, "skipped", why))
    return out


def _target(value: float, bound: float | None) -> str:
    if bound is None:
        return ""
    return f"<= {bound:g}: {'ok' if value <= bound else 'MISSED'}"


def scale_line(figures: Figures) -> str:
    nan = float("nan")
    s, steady = figures.seconds, figures.steady
    per_host = figures.worst_phase_requests() if figures.store_requests else nan
    return (
        f"scale hosts={figures.hosts} ranks={figures.ranks} "
        f"first_step_s={s.get('first_step', nan):.2f} kill_s={s.get('kill', nan):.2f} "
        f"host_lost_s={s.get('host_lost', nan):.2f} "
        f"hang_named_s={s.get('hang_named', nan):.2f} "
        f"launcher_core={steady.get('launcher_core', nan):.3f} "
        f"launcher_rss_mb={steady.get('launcher_rss_mb', nan):.0f} "
        f"status_s={steady.get('status_s', nan):.2f} "
        f"store_requests_per_host={per_host:.1f}"
        + (f" kill_stopped_s={s['kill_stopped']:.2f}" if "kill_stopped" in s else "")
    )
