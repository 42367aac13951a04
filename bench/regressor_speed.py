"""Joint-torque regressor speed: sysid_core vs Pinocchio on the same 7-DOF arm.

Ours: ``load_robot(path).regressor(q, dq, ddq)``, vectorised over samples; it returns an
(N, n, 10 nb) view of a joint-major buffer, so it is timed both as returned and followed
by ``np.ascontiguousarray`` (what a caller needing a C-contiguous array pays).
Pinocchio: ``computeJointTorqueRegressor`` per sample in a Python loop, each result copied
into an (N, n, 10 nb) array (what a user of Pinocchio from Python has to do): a fresh array
per call, like for like with ours as returned, and one buffer reused across calls, like for
like with ours given its previous result to overwrite (``out=``).

The two are first checked to give the same torques (Y @ theta with each library's own
parameters read from the MJCF), then timed interleaved. Prints numbers; asserts nothing
about speed. Run: ``make bench`` (installs Pinocchio) or ``python bench/regressor_speed.py``.

Ours makes no BLAS call (its small products are einsum and ufunc loops); to show that BLAS
threading does not matter, the script times with the threading it was started with, then
re-runs itself once with single-threaded BLAS (unless OPENBLAS_NUM_THREADS was already set,
or ``--no-rerun`` is given). Ours keeps its temporaries between calls (per thread), so
every timed run after the warm-up reuses them, as repeated calls in an application do.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

BLAS_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODEL = ROOT / "config" / "robots" / "panda_class.xml"
N_MAIN = 15000
N_SCALING = (1000, 60000)
REPEATS = 7
SEED = 0
REL_TOL = 1e-9
PIN_FRESH = "pinocchio -> fresh (N,n,p)"
# Pinocchio's dynamic parameters per body are [m, mcx, mcy, mcz, Ixx, Ixy, Iyy, Ixz, Iyz, Izz];
# ours are [m, hx, hy, hz, Ixx, Ixy, Ixz, Iyy, Iyz, Izz]. PIN_TO_OURS[k] = Pinocchio index of our k.
PIN_TO_OURS = np.array([0, 1, 2, 3, 4, 5, 7, 6, 8, 9])


def samples(robot, n, rng):
    lo, hi = robot.joint_range[:, 0], robot.joint_range[:, 1]
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        raise SystemExit(f"{MODEL}: every joint needs finite limits for this benchmark")
    q = rng.uniform(lo, hi, size=(n, robot.n_joints))
    dq = rng.uniform(-2.0, 2.0, size=(n, robot.n_joints))
    ddq = rng.uniform(-2.0, 2.0, size=(n, robot.n_joints))
    return q, dq, ddq


def ours(robot, q, dq, ddq):
    return robot.regressor(q, dq, ddq)


def ours_contiguous(robot, q, dq, ddq):
    return np.ascontiguousarray(robot.regressor(q, dq, ddq))


def pinocchio_loop(pin, model, data, q, dq, ddq, out):
    regressor = pin.computeJointTorqueRegressor
    for i in range(q.shape[0]):
        out[i] = regressor(model, data, q[i], dq[i], ddq[i])
    return out


def check_agreement(pin, robot, model, data, q, dq, ddq):
    """Torques Y @ theta from both libraries, each with its own parameters; returns the report."""
    n = robot.n_joints
    nb = robot.n_bodies
    if model.nq != n or model.nv != n or model.njoints - 1 != nb:
        raise SystemExit(f"model mismatch: Pinocchio nq={model.nq} nv={model.nv} "
                         f"bodies={model.njoints - 1}, ours n={n} bodies={nb}")
    names = tuple(model.names)[1:]
    if names != robot.joint_names:
        raise SystemExit(f"joint order differs: Pinocchio {names}, ours {robot.joint_names}")
    if not np.allclose(np.asarray(model.gravity.linear), robot.gravity, rtol=0, atol=1e-12):
        raise SystemExit(f"gravity differs: Pinocchio {model.gravity.linear}, MJCF {robot.gravity}")

    Y_ours = ours(robot, q, dq, ddq)
    Y_pin = pinocchio_loop(pin, model, data, q, dq, ddq, np.empty((q.shape[0], n, 10 * nb)))
    theta_ours = robot.nominal_parameters.reshape(-1)
    theta_pin = np.concatenate([model.inertias[j].toDynamicParameters() for j in range(1, model.njoints)])
    tau_ours = Y_ours @ theta_ours
    tau_pin = Y_pin @ theta_pin
    scale = np.abs(tau_pin).max()
    tau_diff = np.abs(tau_ours - tau_pin).max()
    # The regressors themselves, columns put in the same parameter order.
    perm = (np.arange(nb)[:, None] * 10 + PIN_TO_OURS[None, :]).reshape(-1)
    y_diff = np.abs(Y_ours - Y_pin[:, :, perm]).max()
    theta_diff = np.abs(theta_ours - theta_pin[perm]).max()
    print(f"agreement on {q.shape[0]} samples (torques up to {scale:.3g} N m):")
    print(f"  max |tau_ours - tau_pin|          = {tau_diff:.3e} N m  (relative {tau_diff / scale:.3e})")
    print(f"  max |Y_ours - Y_pin| (same order)  = {y_diff:.3e}  (relative {y_diff / np.abs(Y_pin).max():.3e})")
    print(f"  max |theta_ours - theta_pin|      = {theta_diff:.3e}  (MJCF parsed by MuJoCo vs Pinocchio)")
    if tau_diff > REL_TOL * scale:
        raise SystemExit(f"FAIL: torques disagree beyond {REL_TOL:g} relative; timings would be meaningless")
    print(f"  OK: agree to {REL_TOL:g} relative\n")


def time_interleaved(funcs, repeats):
    """Wall times (s) of each function, run round-robin ``repeats`` times."""
    times = {name: [] for name in funcs}
    for _ in range(repeats):
        for name, f in funcs.items():
            t0 = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t0)
    return {name: np.array(t) for name, t in times.items()}


def bench(pin, robot, model, data, n, rng):
    q, dq, ddq = samples(robot, n, rng)
    shape = (n, robot.n_joints, 10 * robot.n_bodies)
    out = np.empty(shape)
    previous = robot.regressor(q, dq, ddq)
    funcs = {
        "ours (view as returned)": lambda: ours(robot, q, dq, ddq),
        "ours + ascontiguousarray": lambda: ours_contiguous(robot, q, dq, ddq),
        # into its previous result, already paged in: like for like with Pinocchio's reused buffer
        "ours (out= earlier result)": lambda: robot.regressor(q, dq, ddq, out=previous),
        # like for like: a fresh (N, n, p) array per call, as ours returns (its pages are
        # faulted in while written, in both)
        PIN_FRESH: lambda: pinocchio_loop(pin, model, data, q, dq, ddq, np.empty(shape)),
        # the same loop into one buffer reused across calls, already paged in
        "pinocchio -> reused buffer": lambda: pinocchio_loop(pin, model, data, q, dq, ddq, out),
    }
    for f in funcs.values():  # warm-up at this size (allocations, caches)
        f()
    return time_interleaved(funcs, REPEATS)


def print_table(n, times):
    print(f"N = {n} samples, {REPEATS} interleaved runs each")
    print(f"  {'method':<27} {'min ms':>10} {'median ms':>10} {'samples/s (min)':>16}")
    for name, t in times.items():
        print(f"  {name:<27} {t.min() * 1e3:>10.2f} {np.median(t) * 1e3:>10.2f} {n / t.min():>16,.0f}")
    for reference, names in ((PIN_FRESH, ("ours (view as returned)", "ours + ascontiguousarray")),
                             ("pinocchio -> reused buffer", ("ours (out= earlier result)",))):
        pin_t = times[reference]
        for name in names:
            t = times[name]
            print(f"  speed-up of {name} vs {reference}: "
                  f"min {pin_t.min() / t.min():.2f}x, median {np.median(pin_t) / np.median(t):.2f}x")
    print()


def main() -> int:
    try:
        import pinocchio as pin
    except ImportError:
        print("pinocchio not installed; `make bench` installs it")
        return 0
    from sysid_core import load_robot

    robot = load_robot(MODEL)
    model = pin.buildModelFromMJCF(str(MODEL))
    data = model.createData()
    print(f"model: {MODEL.relative_to(ROOT)}  ({robot.n_joints} joints, {robot.n_bodies} bodies, "
          f"regressor {robot.n_joints} x {10 * robot.n_bodies})")
    blas = os.environ.get("OPENBLAS_NUM_THREADS", f"default ({os.cpu_count()} cores)")
    print(f"numpy {np.__version__}, pinocchio {pin.__version__}, python {sys.version.split()[0]}, "
          f"BLAS threads: {blas}")
    print(f"gravity: MJCF {robot.gravity}, Pinocchio {np.asarray(model.gravity.linear)}\n")

    rng = np.random.default_rng(SEED)
    ours(robot, *samples(robot, 10, rng))  # first call may build/cached code
    check_agreement(pin, robot, model, data, *samples(robot, N_MAIN, rng))

    for n in (N_MAIN, *N_SCALING):
        print_table(n, bench(pin, robot, model, data, n, rng))

    if "--no-rerun" not in sys.argv and "OPENBLAS_NUM_THREADS" not in os.environ:
        print("=" * 78)
        print("again with single-threaded BLAS (OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=MKL_NUM_THREADS=1)")
        print("=" * 78)
        env = dict(os.environ, **{k: "1" for k in BLAS_ENV})
        return subprocess.run([sys.executable, str(Path(__file__).resolve()), "--no-rerun"], env=env).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
