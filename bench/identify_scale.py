"""Identification at scale: wall time and peak memory of ``identify()`` on long recordings.

The OpenArm-class arm (7 joints), 1 kHz. The data: MuJoCo's inverse dynamics (``ideal_recording``)
along a 10-minute multisine, exact ddq ("ideal"), or the same with
sensor noise and no ddq, so that every sample goes through the zero-phase filters ("filtered");
60 minutes repeat the 10-minute plan six times (time runs on). Each case runs in a fresh
process (this script with ``--child``) that loads the recording from .npy files, the model,
then times ``identify()``; peak memory is the process's peak resident size during it (VmHWM,
reset just before through /proc/self/clear_refs) less its resident size before it (the
recording, the imports and the model): what identification adds. The last two cases cut the
10-minute recording so that its last regressor block is as long as the 60-minute one's: the
regressor keeps a workspace per block length, a few MB that depend on it, not on the duration.

``sysid-identify config/robots/panda_class.xml`` (terminal, 15 s, sim, no plots) is timed as a
command, 3 runs, with this checkout and, given ``--base DIR`` (another checkout of the
repository to compare with, e.g. ``git worktree add DIR <commit>`` or ``git archive``), with that
one (PYTHONPATH=DIR, same interpreter). Run with OPENBLAS_NUM_THREADS=1 for figures.

Run: ``python bench/identify_scale.py [--base DIR] [--no-60]``; prints a table, asserts nothing.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARM = ROOT / "config" / "robots" / "openarm_class.xml"
PANDA = ROOT / "config" / "robots" / "panda_class.xml"
RATE = 1000.0
MINUTES = 10
CASES = (  # (label, data, minutes, scope, target wall s, target MB, last block as 60 minutes')
    ("10 min terminal", "ideal", 10, "terminal", 3.0, 300, False),
    ("10 min full", "ideal", 10, "full", 10.0, 500, False),
    ("10 min terminal, filtered", "filtered", 10, "terminal", None, 300, False),
    ("60 min terminal", "ideal", 60, "terminal", None, "as 10 min", False),
    ("60 min full", "ideal", 60, "full", None, "as 10 min", False),
    ("10 min terminal, last block as 60 min", "ideal", 10, "terminal", None, None, True),
    ("10 min full, last block as 60 min", "ideal", 10, "full", None, None, True),
)


def _status_mb(field: str) -> float:
    """VmRSS or VmHWM (the peak resident size since the last reset) of this process, MB."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1e3


def _reset_peak() -> bool:
    """Reset VmHWM to the current resident size (Linux >= 4.0); False where that is refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def make_data(directory: Path) -> None:
    """The 10-minute ideal recording (and its noisy, ddq-less twin) as .npy files."""
    import numpy as np

    from sysid_core import load_robot
    from sysid_core.excitation.multisine import multisine
    from sysid_core.simulation import ideal_recording

    robot = load_robot(ARM)
    plan = multisine(robot.joint_range, MINUTES * 60.0, RATE, seed=0, max_velocity=1.5)
    rec = ideal_recording(robot.model, plan)
    rng = np.random.default_rng(0)
    for name, value in (("time", rec.time), ("q", rec.q), ("dq", rec.dq), ("ddq", rec.ddq), ("tau", rec.tau)):
        np.save(directory / f"{name}.npy", value)
    np.save(directory / "q_noisy.npy", rec.q + 1e-4 * rng.standard_normal(rec.q.shape))
    np.save(directory / "dq_noisy.npy", rec.dq + 2e-3 * rng.standard_normal(rec.q.shape))
    np.save(directory / "tau_noisy.npy", rec.tau + 2e-2 * rng.standard_normal(rec.q.shape))
    (directory / "joints.json").write_text(json.dumps(list(rec.joint_names)))


def child(directory: str, data: str, minutes: int, scope: str, samples: int | None = None) -> dict:
    import numpy as np

    from sysid_core import load_robot
    from sysid_core.identification.identify import IdentificationConfig, identify
    from sysid_core.identification.recording import Recording

    d = Path(directory)
    load = (lambda name: np.load(d / f"{name}.npy"))
    repeat = minutes // MINUTES
    time_s = load("time")
    span = time_s[-1] - time_s[0] + 1.0 / RATE
    time_s = np.concatenate([time_s + k * span for k in range(repeat)])
    tile = (lambda x: np.concatenate([x] * repeat) if repeat > 1 else x)
    if data == "ideal":
        rec = Recording(time_s, tile(load("q")), tile(load("dq")), tile(load("tau")),
                        tuple(json.loads((d / "joints.json").read_text())), tile(load("ddq")))
    else:
        rec = Recording(time_s, tile(load("q_noisy")), tile(load("dq_noisy")), tile(load("tau_noisy")),
                        tuple(json.loads((d / "joints.json").read_text())))
    if samples is not None:
        rec = rec.rows(slice(0, samples))
    robot = load_robot(ARM)
    recording_mb = sum(a.nbytes for a in (rec.time, rec.q, rec.dq, rec.tau) + ((rec.ddq,) if rec.ddq is not None
                                                                                 else ())) / 1e6
    reset = _reset_peak()
    before = _status_mb("VmRSS")
    start = time.perf_counter()
    result = identify(robot, rec, IdentificationConfig(scope=scope))
    wall = time.perf_counter() - start
    # without a reset, ru_maxrss: the whole process's peak (loading included), an upper bound
    peak = _status_mb("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
    return {"wall": wall, "above": peak - before, "recording_mb": recording_mb, "samples": rec.n_samples,
            "verdict": result.verdict.level, "mass": float(result.terminal_parameters[0]),
            "rank": result.metrics.rank}


def _samples_ending_like_60(directory: Path) -> int:
    """The most samples of the 10-minute recording whose last regressor block is as long as the
    60-minute one's: the regressor keeps a workspace per block length (regressor.KEPT), so the
    last block's length, not the duration, sets a few MB of the peak."""
    from sysid_core.dynamics.regressor import BLOCK
    import numpy as np

    ten = np.load(directory / "time.npy", mmap_mode="r").shape[0]
    return ten - (ten - (60 // MINUTES) * ten) % BLOCK


def run_child(directory: Path, data: str, minutes: int, scope: str, samples: int | None = None) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", str(directory), data, str(minutes), scope]
                         + ([str(samples)] if samples else []), capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def time_cli(pythonpath: str | None, runs: int = 3) -> list:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    times = []
    with tempfile.TemporaryDirectory() as out:
        for _ in range(runs):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "sysid_core.cli", str(PANDA), "--scope", "terminal", "--duration",
                            "15", "--source", "sim", "--no-plots", "--output-dir", out],
                           env=env, cwd=pythonpath or ROOT, check=True, capture_output=True)
            times.append(time.perf_counter() - start)
    return times


def main(argv) -> None:
    base = argv[argv.index("--base") + 1] if "--base" in argv else None
    cases = [c for c in CASES if not ("--no-60" in argv and (c[2] == 60 or c[6]))]
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}, load average "
          f"{os.getloadavg()[0]:.1f}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        make_data(Path(tmp))
        print("| case | samples | recording MB | identify wall s (target) | peak MB above the recording (target) "
              "| verdict | terminal mass kg |")
        print("|---|---|---|---|---|---|---|")
        for label, data, minutes, scope, wall_target, mb_target, tail in cases:
            r = run_child(Path(tmp), data, minutes, scope, _samples_ending_like_60(Path(tmp)) if tail else None)
            wt = f" (<= {wall_target:g})" if wall_target else ""
            mt = f" (<= {mb_target})" if isinstance(mb_target, int) else f" ({mb_target})" if mb_target else ""
            print(f"| {label} | {r['samples']} | {r['recording_mb']:.0f} | {r['wall']:.2f}{wt} | {r['above']:.0f}{mt} "
                  f"| {r['verdict']} | {r['mass']:.4f} |")
    after = time_cli(None)
    line = f"sysid-identify Panda class, terminal, 15 s, sim, --no-plots: this checkout {min(after):.2f} s " \
           f"(median {sorted(after)[1]:.2f})"
    if base:
        before = time_cli(base)
        line += f"; base {min(before):.2f} s (median {sorted(before)[1]:.2f}); after/before " \
                f"{min(after) / min(before):.2f} (min), {sorted(after)[1] / sorted(before)[1]:.2f} (median)"
    print(line)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5],
                               int(sys.argv[6]) if len(sys.argv) > 6 else None)))
    else:
        main(sys.argv[1:])
