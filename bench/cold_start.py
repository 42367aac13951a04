"""Cold start of the regressor: a fresh process's first call against the warm one, and Pinocchio.

Each measurement runs in a process of its own (this script started again with ``--child``),
so nothing is imported, planned or paged in beforehand:

- ours: ``import sysid_core`` (timed apart), then ``load_robot`` and the first
  ``robot.regressor`` call (timed together and apart), then warm calls;
- Pinocchio: ``import pinocchio`` and ``buildModelFromMJCF`` beforehand (not timed), then its
  first ``computeJointTorqueRegressor`` loop over the samples into a fresh (N, n, 10 nb)
  array, then warm loops;
- fresh memory: the first and a later ``np.zeros`` + fill of an array the size of the
  regressor's result, in a fresh process: what the operating system charges for paging in
  fresh memory, which any first call producing that array pays (ours and Pinocchio's alike).

The samples are drawn once per count like bench/regressor_speed.py's (q uniform in the
joint limits, dq and ddq in +-2) and read by every process, Panda-class arm. Prints medians over the processes; asserts nothing.
Run: ``python bench/cold_start.py`` (Pinocchio from requirements-bench.txt; without it, the
Pinocchio rows are skipped).
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "config" / "robots" / "panda_class.xml"
COUNTS = (1000, 15000, 60000)
PROCESSES = 5
WARM_CALLS = 7
SEED = 0


def write_samples(path: Path, count: int) -> None:
    """The samples every child reads: q uniform in the joint limits, dq and ddq in +-2."""
    import mujoco
    import numpy as np
    model = mujoco.MjModel.from_xml_path(str(MODEL))
    low, high = model.jnt_range.T
    rng = np.random.default_rng(SEED)
    np.save(path, np.stack([rng.uniform(low, high, size=(count, model.nv)),
                            rng.uniform(-2.0, 2.0, size=(count, model.nv)),
                            rng.uniform(-2.0, 2.0, size=(count, model.nv))]))


def _warm(np, call) -> dict:
    times, cpu = [], []
    for _ in range(WARM_CALLS):
        start, start_cpu = time.perf_counter(), time.process_time()
        call()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return {"warm_min": min(times), "warm_median": float(np.median(times)), "warm_cpu": float(np.median(cpu))}


def child_ours(samples: str) -> dict:
    start = time.perf_counter()
    import numpy as np

    from sysid_core import load_robot
    imported = time.perf_counter()
    q, dq, ddq = np.load(samples)
    begin = time.perf_counter()
    robot = load_robot(MODEL)
    loaded, loaded_cpu = time.perf_counter(), time.process_time()
    robot.regressor(q, dq, ddq)
    first, first_cpu = time.perf_counter(), time.process_time()
    return {"import": imported - start, "load": loaded - begin, "first": first - loaded, "load_first": first - begin,
            "first_cpu": first_cpu - loaded_cpu,
            "sympy": "sympy" in sys.modules, **_warm(np, lambda: robot.regressor(q, dq, ddq))}


def child_pinocchio(samples: str) -> dict:
    import numpy as np
    import pinocchio as pin
    model = pin.buildModelFromMJCF(str(MODEL))
    data = model.createData()
    q, dq, ddq = np.load(samples)
    count = q.shape[0]
    shape = (count, model.nv, 10 * (model.njoints - 1))

    def loop():
        out = np.empty(shape)
        for i in range(count):
            out[i] = pin.computeJointTorqueRegressor(model, data, q[i], dq[i], ddq[i])
        return out

    begin = time.perf_counter()
    loop()
    return {"first": time.perf_counter() - begin, **_warm(np, loop)}


def child_memory(samples: str) -> dict:
    import numpy as np
    shape = (7, 70, np.load(samples).shape[1])
    times = []
    for _ in range(3):
        start = time.perf_counter()
        array = np.zeros(shape)
        array.fill(1.0)
        times.append(time.perf_counter() - start)
        del array
    return {"first": times[0], "later": min(times[1:])}


CHILDREN = {"ours": child_ours, "pinocchio": child_pinocchio, "memory": child_memory}


def run_child(kind: str, samples: Path) -> dict | None:
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", kind, str(samples)],
                          capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        if kind == "pinocchio" and "No module named 'pinocchio'" in done.stderr:
            return None
        raise SystemExit(f"{kind} failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def median(values):
    values = sorted(values)
    return values[len(values) // 2] if len(values) % 2 else 0.5 * (values[len(values) // 2 - 1] + values[len(values) // 2])


def main() -> int:
    print(f"model: {MODEL.relative_to(ROOT)}; {PROCESSES} fresh processes per row, medians; times in ms\n")
    for count in COUNTS:
        runs = {kind: [] for kind in CHILDREN}
        with tempfile.TemporaryDirectory() as folder:
            samples = Path(folder) / "samples.npy"
            write_samples(samples, count)
            for _ in range(PROCESSES):  # interleaved, so a slow spell of the machine hits all alike
                for kind in CHILDREN:
                    result = run_child(kind, samples)
                    if result is not None:
                        runs[kind].append(result)
        ours, pin, memory = runs["ours"], runs["pinocchio"], runs["memory"]
        if any(r["sympy"] for r in ours):
            print("  note: SymPy was imported by the regressor")

        def m(rows, key):
            return median([r[key] for r in rows]) * 1e3

        print(f"N = {count}")
        print(f"  ours: import sysid_core {m(ours, 'import'):.1f}, load_robot {m(ours, 'load'):.1f}, "
              f"first call {m(ours, 'first'):.1f}, load_robot + first call {m(ours, 'load_first'):.1f}, "
              f"warm min {m(ours, 'warm_min'):.2f} / median {m(ours, 'warm_median'):.2f}")
        print(f"  ours: first call / warm median {m(ours, 'first') / m(ours, 'warm_median'):.2f}x, "
              f"first call - warm median {m(ours, 'first') - m(ours, 'warm_median'):+.1f}; in CPU time (what "
              f"waiting for a busy machine does not inflate) {m(ours, 'first_cpu'):.1f} vs {m(ours, 'warm_cpu'):.1f}, "
              f"{m(ours, 'first_cpu') - m(ours, 'warm_cpu'):+.1f}")
        print(f"  fresh memory for the result ({7 * 70 * count * 8 / 1e6:.0f} MB np.zeros + fill): "
              f"first {m(memory, 'first'):.1f}, later {m(memory, 'later'):.1f}")
        if pin:
            print(f"  Pinocchio loop: first {m(pin, 'first'):.1f}, warm min {m(pin, 'warm_min'):.2f} / "
                  f"median {m(pin, 'warm_median'):.2f}")
            print(f"  fresh process, load_robot + first call vs Pinocchio's first loop: "
                  f"{m(pin, 'first') / m(ours, 'load_first'):.2f}x faster; "
                  f"warm: {m(pin, 'warm_median') / m(ours, 'warm_median'):.2f}x (median), "
                  f"{m(pin, 'warm_min') / m(ours, 'warm_min'):.2f}x (min)")
        print()
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        sys.path.insert(0, str(ROOT))
        print(json.dumps(CHILDREN[sys.argv[2]](sys.argv[3])))
        sys.exit(0)
    sys.exit(main())
