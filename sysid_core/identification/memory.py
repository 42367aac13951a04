"""What an identification needs of the machine's memory, and what the machine has: checked before
the work starts, so a run too big for the machine is refused with the numbers instead of being
killed half-way (with whatever it had not saved yet)."""
from __future__ import annotations

from pathlib import Path

from .identify import IdentificationConfig, column_names

# peak memory of a run: per (sample x joint x identified parameter), the regressor and the
# copies the estimators take of it (4.8 doubles by tracemalloc from 30 to 60 s at 1 kHz on the
# OpenArm-class arm, terminal and full scope alike, with the whole regressor in memory at once),
# plus what does not grow with the samples (about 100 MB there). The identification goes through
# the data in blocks of the regressor's joint-major layout, which do not grow with the recording,
# so this is an upper bound, and a loose one: the CLI's 8 s full-scope run of test_cli peaks at
# 111 MB against 297 MB estimated
BYTES_PER_REGRESSOR_ENTRY = 4 * 8
FIXED_BYTES = 128 * 2 ** 20


def memory_needed(robot, config: IdentificationConfig, samples: int) -> int:
    """Peak bytes of identifying ``robot`` from ``samples`` samples with ``config`` (an estimate)."""
    return samples * robot.n_joints * len(column_names(robot, config)) * BYTES_PER_REGRESSOR_ENTRY + FIXED_BYTES


def available_memory() -> int | None:
    """Bytes this process can still allocate: the kernel's MemAvailable, lowered to what a
    cgroup (container) limit leaves; None where neither is known."""
    limits = []
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    limits.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        top = Path("/sys/fs/cgroup")
        cap = (top / "memory.max").read_text().strip()
        if cap != "max":
            limits.append(int(cap) - int((top / "memory.current").read_text()))
    except (OSError, ValueError):
        pass
    return min(limits) if limits else None


def describe_bytes(n: float) -> str:
    """``n`` bytes for a message: "1.5 GiB"."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.3g} {unit}"
        n /= 1024
