"""Optimized Fourier excitation, trajectory files, and their use by the CLI and trajectory_publisher.

Oracles are independent of the code under test: finite differences for the derivatives,
MuJoCo's mj_inverse for the torques and mj_geomDistance for the clearance, a direct SVD for the
condition numbers, polynomials that quintic Hermite interpolation must reproduce exactly.
"""
import json

import mujoco
from types import SimpleNamespace
import time

import numpy as np
import pytest

from conftest import MODELS, ROBOTS, inverse_dynamics_mujoco
from sysid_core.cli import main
from sysid_core.errors import DataError
from sysid_core.excitation.multisine import multisine
from sysid_core.excitation.design import (CAP_MULTISINE_SEEDS, CAP_REFERENCE_RATE, CONDITION_CAP_FRACTION,
                                          DEFAULT_HARMONICS, TERMINAL_CAP_HARMONICS, TORQUE_SHARE, ExcitationDesign, actuator_torque_limits, default_criterion,
                                          optimize_excitation, regressor_condition, rest_to_rest_series,
                                          slow_to_torque_limits)
from sysid_core.dynamics.model import load_robot
from sysid_core.excitation.trajectory import Trajectory, load_trajectory, resample, save_trajectory
from sysid_core.identification.identify import IdentificationConfig, base_regressor

PLANAR = MODELS / "planar_2r_vertical.xml"
PILLAR = MODELS / "planar_3r_pillar.xml"
OPENARM = ROBOTS / "openarm_class.xml"
FULL = IdentificationConfig(scope="full")


def _damped_planar():
    """The vertical 2R arm with the heavy joint damping of an industrial arm (UR10e: 350 N m s/rad on a
    330 N m shoulder): 2 rad/s would need three times the torque limits."""
    xml = PLANAR.read_text().replace('<joint name="joint1"/>', '<joint name="joint1" damping="300" armature="0.1"/>')
    return load_robot(xml.replace('<joint name="joint2"/>', '<joint name="joint2" damping="100" armature="0.1"/>'))


@pytest.fixture(scope="module")
def planar():
    return load_robot(PLANAR)


@pytest.fixture(scope="module")
def design(planar):
    """One optimized excitation of the vertical 2R arm, within velocity, acceleration and torque limits."""
    return optimize_excitation(planar, 6.0, 500.0, config=FULL, criterion="condition", base_frequency=1 / 3,
                               n_harmonics=5, seed=3, max_velocity=2.5, max_acceleration=12.0,
                               torque_limits=[25.0, 8.0], time_limit_s=6.0, max_restarts=2, max_iterations=40)


# --- the Fourier series ---------------------------------------------------------------------

def test_series_is_at_rest_at_start_and_after_every_period():
    rng = np.random.default_rng(0)
    start = np.array([0.3, -1.2, 2.0])
    series = rest_to_rest_series(rng.normal(size=(3, 8)), start, base_frequency=0.25)
    q, dq, ddq = series.evaluate(np.array([0.0, 4.0, 8.0]))   # t = 0 and two whole periods
    np.testing.assert_allclose(q, np.tile(start, (3, 1)), atol=1e-12)
    np.testing.assert_allclose(dq, 0.0, atol=1e-12)
    np.testing.assert_allclose(ddq, 0.0, atol=1e-12)
    # and it moves in between
    assert np.abs(series.evaluate(np.array([1.3]))[1]).max() > 0.1


def test_series_derivatives_equal_finite_differences():
    series = rest_to_rest_series(np.random.default_rng(1).normal(size=(2, 6)), np.zeros(2), 0.5)
    traj = series.trajectory(2.0, 20000.0)
    h = 1.0 / 20000.0
    np.testing.assert_allclose((traj.q[2:] - traj.q[:-2]) / (2 * h), traj.dq[1:-1], atol=1e-6)
    np.testing.assert_allclose((traj.dq[2:] - traj.dq[:-2]) / (2 * h), traj.ddq[1:-1], atol=1e-5)


def test_optimized_trajectory_ends_exactly_at_rest(design):
    traj = design.trajectory
    assert traj.time[0] == 0.0 and traj.time[-1] == pytest.approx(6.0)
    start = design.series.evaluate(np.zeros(1))[0][0]
    for k in (0, -1):
        np.testing.assert_array_equal(traj.dq[k], 0.0)
        np.testing.assert_array_equal(traj.ddq[k], 0.0)
        np.testing.assert_allclose(traj.q[k], start, atol=1e-12)
    np.testing.assert_array_equal(traj.q[0], traj.q[-1])


# --- the optimizer ----------------------------------------------------------------------------

def test_limits_respected_on_every_sample(design, planar):
    traj = design.trajectory
    assert isinstance(design, ExcitationDesign) and design.limits_met
    margin = 0.05
    assert np.all(traj.q >= planar.joint_range[:, 0] + margin) and np.all(traj.q <= planar.joint_range[:, 1] - margin)
    assert np.abs(traj.dq).max() <= 2.5 and np.abs(traj.ddq).max() <= 12.0
    torque = inverse_dynamics_mujoco(planar.model, traj.q, traj.dq, traj.ddq)
    assert np.all(np.abs(torque).max(axis=0) <= TORQUE_SHARE * np.array([25.0, 8.0]))
    # the limits are used, not avoided: the search pushes the motion against some of them
    assert max(float(np.max(u)) for u in design.limit_usage.values()) > 0.9


def test_optimizer_improves_the_condition_number(design, planar):
    assert design.criterion_value < design.initial_criterion_value
    # reported figures agree with a direct SVD of the base regressor on the returned trajectory
    cols, _ = base_regressor(planar, FULL, design.trajectory.q[::3], design.trajectory.dq[::3],
                             design.trajectory.ddq[::3])
    cols = cols.reshape(-1, cols.shape[-1])
    s = np.linalg.svd(cols, compute_uv=False)
    assert design.condition_number == pytest.approx(s[0] / s[-1], rel=0.05)
    s = np.linalg.svd(cols / np.linalg.norm(cols, axis=0), compute_uv=False)
    assert design.condition_number_scaled == pytest.approx(s[0] / s[-1], rel=0.05)
    # the criterion is the log of that condition number (its Coulomb columns smoothed below 0.02 rad/s)
    assert design.criterion_value == pytest.approx(np.log(s[0] / s[-1]), rel=0.02)
    ms = multisine(planar.joint_range, 6.0, 500.0, seed=3, max_velocity=2.5, max_acceleration=12.0)
    assert design.condition_number_scaled < 0.7 * regressor_condition(planar, ms, FULL)[1]


def test_same_seed_same_excitation(planar):
    kwargs = dict(config=FULL, n_harmonics=4, base_frequency=0.5, time_limit_s=60.0, max_restarts=1,
                  max_iterations=4, torque_limits=None)
    a = optimize_excitation(planar, 4.0, 200.0, seed=11, **kwargs)
    b = optimize_excitation(planar, 4.0, 200.0, seed=11, **kwargs)
    c = optimize_excitation(planar, 4.0, 200.0, seed=12, **kwargs)
    np.testing.assert_array_equal(a.series.a, b.series.a)
    np.testing.assert_array_equal(a.trajectory.q, b.trajectory.q)
    assert not np.array_equal(a.series.a, c.series.a)


class StepClock:
    """A monotonic clock that advances ``step`` s at each reading: the search's own time, counted
    in its clock readings (about one per objective or constraint evaluation), not the machine's."""

    def __init__(self, step: float):
        self.step, self.times = step, [1000.0]

    def __call__(self) -> float:
        self.times.append(self.times[-1] + self.step)
        return self.times[-1]


def test_time_limit_bounds_a_seven_joint_search(monkeypatch):
    from sysid_core.excitation import design as design_module, multistart
    clock = StepClock(0.01)
    fake_time = SimpleNamespace(monotonic=clock, perf_counter=time.perf_counter)
    monkeypatch.setattr(design_module, "_time", fake_time)
    monkeypatch.setattr(multistart, "time", fake_time)
    deadlines = []
    search = multistart.run
    monkeypatch.setattr(multistart, "run", lambda problem, seed, deadline, *rest: (
        deadlines.append(deadline), search(problem, seed, deadline, *rest))[1])
    robot = load_robot(OPENARM)
    design = optimize_excitation(robot, 10.0, 200.0, seed=0, time_limit_s=2.0, torque_limits=[54, 54, 28, 28, 10, 10, 10])
    # the budget (200 readings of 10 ms) ran out and bounded the search; the final checks come on
    # top (6 s of this clock at most, as the wall-clock bound this replaces allowed), not the
    # thousands of readings of a search run to the end
    assert len(deadlines) == 1 and clock.times[-1] > deadlines[0]
    assert (clock.times[-1] - deadlines[0]) < 6.0
    assert design.limits_met and design.restarts >= 1
    assert design.trajectory.q.shape == (2001, 7)


def test_a_budget_spent_before_any_start_is_scored_still_gives_a_start_not_rest(planar):
    # 1 ns ends the search before its first start is scored: one start is made and scored on top
    # of the budget, like the final checks (not the arm at rest)
    design = optimize_excitation(planar, 4.0, 100.0, config=FULL, base_frequency=0.5, n_harmonics=3, seed=0,
                                 time_limit_s=1e-9, torque_limits=[25.0, 8.0])
    assert design.limits_met and np.isfinite(design.criterion_value)
    assert np.all(np.max(np.abs(design.trajectory.dq), axis=0) > 0.05)


def test_weighted_criterion_of_the_paper(planar):
    design = optimize_excitation(planar, 4.0, 200.0, config=FULL, criterion="weighted", base_frequency=0.5,
                                 n_harmonics=4, weights=(1.0, 0.5, 2.0), joint_noise_std=[0.05, 0.02],
                                 seed=0, time_limit_s=4.0, max_restarts=1, max_iterations=15)
    assert design.limits_met and np.isfinite(design.criterion_value)
    # the log of a sum of four condition numbers, the whole one weighted by 3.5: at least 3.5 + 3.5 (each >= 1)
    assert design.criterion_value >= np.log(7.0)
    assert design.criterion_value <= design.initial_criterion_value


@pytest.mark.parametrize("kwargs, pattern", [
    (dict(criterion="determinant"), "unknown criterion"),
    (dict(criterion="payload", config=FULL), "needs the terminal scope"),
    (dict(workers=3), "workers"),
    (dict(torque_share=1.5), "torque_share"),
    (dict(n_harmonics=1), "n_harmonics"),
    (dict(start=[3.2, 0.0]), "outside the joint range"),
    (dict(torque_limits=[1.0, 1.0], start=[0.0, 0.0]), "gravity torque at the start pose"),
    # link 2 of the 3R arm would start 2 cm from the pillar: nearer than the clearance asked
    (dict(model=PILLAR, start=[0.15, 0.0, 0.0], min_clearance=0.05), "nearer than min_clearance"),
    (dict(max_velocity=-1.0), "max_velocity"),
    (dict(weights=(0, 0, 0)), "weights"),
    (dict(time_limit_s=0.0), "time_limit_s"),
])
def test_bad_arguments_are_refused(planar, kwargs, pattern):
    robot = load_robot(kwargs.pop("model")) if "model" in kwargs else planar
    with pytest.raises(ValueError, match=pattern):
        optimize_excitation(robot, 4.0, 200.0, **kwargs)


def test_default_criterion_fits_the_scope(planar):
    assert default_criterion(IdentificationConfig(scope="terminal")) == "payload"
    assert default_criterion(FULL) == "d_optimal"
    kwargs = dict(base_frequency=0.5, seed=0, max_restarts=1, max_iterations=3, time_limit_s=30.0)
    design = optimize_excitation(planar, 4.0, 100.0, **kwargs)
    assert design.criterion == "payload"
    # capped by default, as d_optimal (the cap is the default in both scopes), on the wider band the
    # friction pairs' dwelling needs
    assert design.condition_cap == pytest.approx(CONDITION_CAP_FRACTION * design.reference_condition, rel=1e-12)
    assert design.series.a.shape[1] == TERMINAL_CAP_HARMONICS
    free = optimize_excitation(planar, 4.0, 100.0, condition_cap=None, **kwargs)
    assert free.criterion == "payload" and free.condition_cap is None and free.reference_condition is None
    assert free.series.a.shape[1] == DEFAULT_HARMONICS
    full = optimize_excitation(planar, 4.0, 100.0, config=FULL, **dict(kwargs, max_iterations=1))
    assert full.criterion == "d_optimal" and full.condition_cap is not None
    assert full.series.a.shape[1] == DEFAULT_HARMONICS
    looser = optimize_excitation(planar, 4.0, 100.0, n_harmonics=3, cap_fraction=0.5, **kwargs)
    assert looser.condition_cap == pytest.approx(0.5 * looser.reference_condition, rel=1e-12)
    assert looser.series.a.shape[1] == 3


def test_search_never_returns_worse_than_its_best_start():
    """On a heavily damped arm every start is scaled into the torque limits and every local search's
    best point is checked on every sample: the result scores no worse than the best start. (The
    former search started beyond the torque limits and lost them in its squashed coordinates: it
    returned 1.2 to 3.6 times the condition number of its best start on this arm.)"""
    robot = _damped_planar()
    for seed in range(3):
        design = optimize_excitation(robot, 6.0, 200.0, config=FULL, criterion="condition", base_frequency=1 / 3,
                                     n_harmonics=5, seed=seed, torque_limits=[200.0, 60.0], time_limit_s=30.0,
                                     max_restarts=2, max_iterations=30)
        assert design.limits_met
        assert design.criterion_value <= design.initial_criterion_value
        # the reported value is the returned trajectory's own: the log condition number with unit columns
        cols, _ = base_regressor(robot, FULL, design.trajectory.q[::2], design.trajectory.dq[::2],
                                 design.trajectory.ddq[::2])
        cols = cols.reshape(-1, cols.shape[-1])
        s = np.linalg.svd(cols / np.linalg.norm(cols, axis=0), compute_uv=False)
        assert design.criterion_value == pytest.approx(np.log(s[0] / s[-1]), rel=0.02)


def test_a_local_search_gone_astray_is_not_returned(planar, monkeypatch):
    """Local searches that end far worse than they began (a feasible point 20 times smaller) or beyond
    the limits (50 times larger) must not cost the result: it is never worse than the best start."""
    import scipy.optimize  # what design looks minimize up in, at each local search
    real = scipy.optimize.minimize

    def astray(fun, x0, jac=None, constraints=(), **kwargs):
        for x in (0.05 * x0, 50.0 * x0):
            fun(x), jac(x), constraints[0]["fun"](x)
        return real(fun, 0.05 * x0, jac=jac, constraints=constraints, method="SLSQP", options={"maxiter": 1})

    monkeypatch.setattr(scipy.optimize, "minimize", astray)
    design = optimize_excitation(planar, 4.0, 200.0, config=FULL, criterion="d_optimal", base_frequency=0.5,
                                 n_harmonics=4, seed=1, torque_limits=[25.0, 8.0], time_limit_s=30.0, max_restarts=2)
    assert design.limits_met and np.isfinite(design.initial_criterion_value)
    assert design.criterion_value <= design.initial_criterion_value


def test_condition_cap_is_held_and_never_costs_the_best_start(planar):
    """D-optimality alone leaves this arm's condition number (unit-norm columns, by a direct SVD)
    at 6.5; under a cap of 3 the design returned meets it, scores no worse than its best start
    (criterion plus the penalty over the cap), and pays for it in D-optimality. The default
    derives the cap from the CLI's multisines."""
    kwargs = dict(config=FULL, criterion="d_optimal", base_frequency=1 / 3, n_harmonics=5, seed=3,
                  max_velocity=2.5, max_acceleration=12.0, torque_limits=[25.0, 8.0], time_limit_s=30.0,
                  max_restarts=2, max_iterations=40)
    free = optimize_excitation(planar, 6.0, 500.0, condition_cap=None, **kwargs)
    capped = optimize_excitation(planar, 6.0, 500.0, condition_cap=3.0, **kwargs)

    def condition(design):
        cols, _ = base_regressor(planar, FULL, design.trajectory.q[::2], design.trajectory.dq[::2],
                                 design.trajectory.ddq[::2])
        cols = cols.reshape(-1, cols.shape[-1])
        s = np.linalg.svd(cols / np.linalg.norm(cols, axis=0), compute_uv=False)
        return s[0] / s[-1]
    assert free.condition_cap is None and condition(free) > 5.0
    assert capped.condition_cap == 3.0 and capped.limits_met
    assert condition(capped) <= 3.0
    assert capped.criterion_value <= capped.initial_criterion_value
    assert capped.criterion_value > free.criterion_value  # within the cap: D-optimality alone, and less of it
    auto = optimize_excitation(planar, 6.0, 500.0, **dict(kwargs, max_restarts=1, max_iterations=1))
    multisines = [regressor_condition(planar, slow_to_torque_limits(
        lambda v, s=s: multisine(planar.joint_range, 6.0, CAP_REFERENCE_RATE, seed=s, max_velocity=v), planar, 2.5,
        torque_limits=[25.0, 8.0], usage=TORQUE_SHARE)[0], FULL)[1] for s in range(CAP_MULTISINE_SEEDS)]
    assert auto.reference_condition == pytest.approx(np.median(multisines), rel=1e-9)
    assert auto.condition_cap == pytest.approx(CONDITION_CAP_FRACTION * np.median(multisines), rel=1e-12)
    looser = optimize_excitation(planar, 6.0, 500.0, **dict(kwargs, max_restarts=1, max_iterations=1, cap_fraction=0.7))
    assert looser.condition_cap == pytest.approx(0.7 * np.median(multisines), rel=1e-12)
    with pytest.raises(ValueError, match="cap_fraction"):
        optimize_excitation(planar, 6.0, 500.0, **dict(kwargs, cap_fraction=float("nan")))
    with pytest.raises(ValueError, match="condition_cap"):
        optimize_excitation(planar, 6.0, 500.0, condition_cap=0.5, **kwargs)


def test_out_and_back_starts_dwell_where_random_coefficients_do_not(planar):
    """Under a cap in the terminal scope, whose condition number each joint's Coulomb and viscous
    columns bound by sqrt((1 + rho) / (1 - rho)), rho = mean |dq| / RMS dq, half the random starts
    are out-and-back motions. Their velocities, evaluated here from the series on a fine grid, dwell
    near zero: the pairs are below the 2.2 that halving a sinusoid's 4.4 needs, where random
    coefficients' are near a Gaussian's 3. Elsewhere the starts stay random coefficients."""
    from sysid_core.excitation import design as D
    n, start = planar.n_joints, np.zeros(planar.n_joints)
    args = (np.ones(3), np.ones(n), 8, 0.1, start, np.full(n, -np.pi), np.full(n, np.pi), np.full(n, 2.0),
            np.full(n, 10.0), np.full(n, np.inf), None)
    problem = D._Problem(planar, IdentificationConfig(), "payload", *args, condition_cap=3.0)
    assert problem.terminal_cap
    assert not D._Problem(planar, IdentificationConfig(), "payload", *args, condition_cap=None).terminal_cap
    assert not D._Problem(planar, FULL, "d_optimal", *args, condition_cap=3.0).terminal_cap
    gen, time = np.random.default_rng(0), np.arange(4000) * 10.0 / 4000

    def pairs(coords):
        dq = rest_to_rest_series(coords, start, 0.1).evaluate(time)[1]
        rho = np.mean(np.abs(dq), axis=0) / np.sqrt(np.mean(dq ** 2, axis=0))
        return np.sqrt((1 + rho) / (1 - rho))
    dwelling = np.concatenate([pairs(problem._dwelling(gen)) for _ in range(40)])
    random = np.concatenate([pairs(gen.standard_normal((n, 14))) for _ in range(40)])
    assert np.median(dwelling) < 2.0 and np.percentile(dwelling, 90) < 2.2
    assert np.median(random) > 2.7


def test_a_terminal_search_from_over_the_cap_first_brings_the_bound_under_it(planar):
    """Phase one of a terminal-scope local search that starts over the cap: SLSQP on the cap's
    bound alone ends at the first point under the cap, within every limit; where the cap is out
    of reach it still ends far below where it began. The bound is read back from the problem's
    constraint (log cap - bound), the limits from its own slacks."""
    from sysid_core.excitation import design as D
    n, start = planar.n_joints, np.zeros(planar.n_joints)
    args = (np.ones(3), np.ones(n), 6, 0.25, start, np.full(n, -np.pi), np.full(n, np.pi), np.full(n, 2.0),
            np.full(n, 10.0), np.full(n, np.inf), None)
    for cap in (3.0, 2.6, 2.0):
        problem = D._Problem(planar, IdentificationConfig(), "payload", *args, condition_cap=cap)
        assert problem.terminal_cap
        x0 = problem.start(np.random.default_rng(1))
        bound0 = cap * np.exp(-problem._point(x0)["constraints"][-1])
        x = problem._under_cap(x0, 50, lambda _x: None)
        end = problem._point(x)
        bound = cap * np.exp(-end["constraints"][-1])
        assert bound0 > 3.5 and np.all(end["limits"] >= 0)
        if cap > 2.5:  # the planar arm's friction pairs and armature keep the bound above 2.57
            assert cap - 0.1 < bound <= cap  # stopped at the first point under the cap
        else:
            assert bound < 0.7 * bound0


def test_two_processes_find_what_one_finds(planar):
    """Starts are seeded by their index: a search ended by max_restarts gives the same design on one
    process or two (the second local search of each round runs in a spawned helper)."""
    kwargs = dict(config=FULL, criterion="d_optimal", n_harmonics=3, base_frequency=0.5, time_limit_s=120.0,
                  max_restarts=4, max_iterations=3, torque_limits=[25.0, 8.0], seed=5)
    one = optimize_excitation(planar, 4.0, 100.0, workers=1, **kwargs)
    two = optimize_excitation(planar, 4.0, 100.0, workers=2, **kwargs)
    assert one.workers == 1 and two.workers == 2 and one.restarts == two.restarts == 4
    np.testing.assert_array_equal(one.series.a, two.series.a)
    np.testing.assert_array_equal(one.series.b, two.series.b)
    assert one.criterion_value == two.criterion_value


@pytest.mark.parametrize("clearance", [None, 0.03])
def test_clearance_kept_on_every_sample(clearance):
    """The 3R arm's links sweep into a pillar when the clearance is not asked for; asked for, every
    sample keeps it, by MuJoCo's own distance between every pair of geoms it would collide."""
    robot = load_robot(PILLAR)
    design = optimize_excitation(robot, 4.0, 100.0, config=FULL, base_frequency=0.5, n_harmonics=4, seed=0,
                                 max_velocity=4.0, max_acceleration=40.0, torque_limits=None, min_clearance=clearance,
                                 time_limit_s=30.0, max_restarts=2, max_iterations=30)
    model, data = robot.model, mujoco.MjData(robot.model)
    pillar = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "pillar")
    nearest = np.inf
    for q in design.trajectory.q:
        data.qpos[:] = q
        mujoco.mj_kinematics(model, data)
        # link 2 and link 3 against the pillar, link 3 against link 1 (link pairs with a joint are filtered)
        nearest = min([nearest] + [mujoco.mj_geomDistance(model, data, a, b, 1.0, None)
                                   for a, b in ((pillar, 2), (pillar, 3), (1, 3))])
    assert design.limits_met
    if clearance is None:
        assert design.min_clearance is None and nearest < 0.0      # it hits the pillar
    else:
        assert nearest >= clearance and design.min_clearance == pytest.approx(nearest, abs=1e-9)


def test_actuator_torque_limits_from_the_model(tmp_path):
    xml = PLANAR.read_text().replace(
        '<motor name="act1" joint="joint1" ctrllimited="false"/>',
        '<motor name="act1" joint="joint1" gear="2" forcelimited="true" forcerange="-10 12"/>').replace(
        '<motor name="act2" joint="joint2" ctrllimited="false"/>',
        '<motor name="act2" joint="joint2" ctrllimited="true" ctrlrange="-3 3"/>')
    path = tmp_path / "limited.xml"
    path.write_text(xml)
    np.testing.assert_allclose(actuator_torque_limits(load_robot(path)), [20.0, 3.0])
    assert actuator_torque_limits(load_robot(PLANAR)) is None


# --- trajectory files ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sample_trajectory():
    series = rest_to_rest_series(np.random.default_rng(5).normal(size=(2, 6)) * 0.3, [0.1, -0.2], 0.5)
    return series.trajectory(4.0, 100.0)


@pytest.mark.parametrize("suffix", [".json", ".csv"])
def test_save_and_load_round_trip(tmp_path, sample_trajectory, suffix):
    path = save_trajectory(tmp_path / f"plan{suffix}", sample_trajectory, ["joint1", "joint2"])
    loaded, names = load_trajectory(path)
    assert names == ("joint1", "joint2")
    for attr in ("time", "q", "dq", "ddq"):
        if suffix == ".json":
            np.testing.assert_array_equal(getattr(loaded, attr), getattr(sample_trajectory, attr))
        else:
            np.testing.assert_allclose(getattr(loaded, attr), getattr(sample_trajectory, attr), rtol=1e-12, atol=0)
    # loading for a model with the joints in another order reorders the columns
    swapped, names = load_trajectory(path, ["joint2", "joint1"])
    assert names == ("joint2", "joint1")
    np.testing.assert_allclose(swapped.q, sample_trajectory.q[:, ::-1], rtol=1e-12)


def _write_csv(path, header, rows):
    path.write_text(",".join(header) + "\n" + "\n".join(",".join(str(v) for v in row) for row in rows) + "\n")
    return path


@pytest.mark.parametrize("case, pattern", [
    ("missing_column", "missing columns"),
    ("nan", "NaN"),
    ("time_backwards", "not increasing"),
    ("other_joints", "differ from the model"),
    ("bad_json", "not valid JSON"),
    ("json_missing_key", "missing ddq"),
    ("not_found", "not found"),
])
def test_bad_trajectory_files(tmp_path, case, pattern):
    header = ["time", "q_joint1", "dq_joint1", "ddq_joint1"]
    rows = [[0.0, 0.0, 0.0, 0.0], [0.01, 0.001, 0.1, 1.0], [0.02, 0.002, 0.1, 0.0]]
    path = tmp_path / "bad.csv"
    if case == "missing_column":
        _write_csv(path, header[:3], [r[:3] for r in rows])
    elif case == "nan":
        rows[1][2] = float("nan")
        _write_csv(path, header, rows)
    elif case == "time_backwards":
        rows[2][0] = 0.005
        _write_csv(path, header, rows)
    elif case == "other_joints":
        _write_csv(path, header, rows)
    elif case == "bad_json":
        path = tmp_path / "bad.json"
        path.write_text("{not json")
    elif case == "json_missing_key":
        path = tmp_path / "bad.json"
        path.write_text(json.dumps({"joint_names": ["joint1"], "time": [0, 1], "q": [[0], [0]], "dq": [[0], [0]]}))
    elif case == "not_found":
        path = tmp_path / "missing.csv"
    with pytest.raises(DataError, match=pattern):
        load_trajectory(path, ["joint1", "joint2"] if case == "other_joints" else None)


def test_unknown_suffix_is_a_value_error(tmp_path, sample_trajectory):
    with pytest.raises(ValueError, match=r"\.json or \.csv"):
        save_trajectory(tmp_path / "plan.txt", sample_trajectory, ["joint1", "joint2"])


def test_resample_reproduces_quintics_exactly():
    t = np.arange(0, 101) / 50.0                       # 2 s at 50 Hz
    coef = np.array([0.3, -1.0, 0.5, 0.2, -0.1, 0.02])
    poly = np.polynomial.Polynomial(coef)
    traj = Trajectory(t, poly(t)[:, None], poly.deriv()(t)[:, None], poly.deriv(2)(t)[:, None])
    fine = resample(traj, 1000.0)
    assert fine.time.shape == (2001,)
    np.testing.assert_allclose(fine.q[:, 0], poly(fine.time), atol=1e-12)
    np.testing.assert_allclose(fine.dq[:, 0], poly.deriv()(fine.time), atol=1e-10)
    np.testing.assert_allclose(fine.ddq[:, 0], poly.deriv(2)(fine.time), atol=1e-8)
    with pytest.raises(ValueError, match="whole number of periods"):
        resample(traj, 333.3)


# --- CLI ------------------------------------------------------------------------------------------

def test_cli_optimized_excitation_saved_and_replayed(tmp_path, capsys):
    saved = tmp_path / "excitation.json"
    base = [str(PLANAR), "--source", "ideal", "--scope", "full", "--duration", "5", "--sample-rate", "200",
            "--no-plots"]
    status = main(base + ["--excitation", "optimized", "--excitation-time-limit", "3", "--save-trajectory",
                          str(saved), "--output-dir", str(tmp_path / "a")])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "Optimizing a Fourier excitation" in out and "limits met: True" in out
    assert "of the multisines'" in out  # the full scope's d_optimal design is held under a cap
    plan, names = load_trajectory(saved)
    assert names == ("joint1", "joint2") and plan.time[-1] == pytest.approx(5.0)
    np.testing.assert_array_equal(plan.dq[[0, -1]], 0.0)

    status = main(base + ["--trajectory", str(saved), "--output-dir", str(tmp_path / "b")])
    out = capsys.readouterr().out
    assert status == 0 and "Replaying" in out
    first = json.loads((tmp_path / "a" / "params.json").read_text())
    again = json.loads((tmp_path / "b" / "params.json").read_text())
    assert again["condition_number"] == pytest.approx(first["condition_number"], rel=1e-9)

    options = ["--excitation", "optimized", "--excitation-time-limit", "1", "--output-dir", str(tmp_path / "c")]
    assert main(base + options + ["--excitation-condition-cap", "0.6"]) == 0
    assert "60% of the multisines'" in capsys.readouterr().out
    assert main(base + options + ["--excitation-condition-cap", "off"]) == 0
    assert "; cap" not in capsys.readouterr().out


@pytest.mark.parametrize("value", ["0", "-0.4", "nan", "inf", "half"])
def test_cli_refuses_a_condition_cap_that_is_no_fraction(capsys, value):
    with pytest.raises(SystemExit) as exit_info:
        main([str(PLANAR), "--excitation", "optimized", "--excitation-condition-cap", value])
    assert exit_info.value.code == 2
    assert f"must be a fraction > 0 of the multisines' condition number, 'off' or 'auto', got {value}" in \
        capsys.readouterr().err


@pytest.mark.parametrize("extra, pattern", [
    (["--trajectory", "TRAJ", "--excitation", "optimized"], "leave out --excitation"),
    (["--trajectory", "/nonexistent/plan.csv"], "not found"),
    (["--save-trajectory", "OUT/plan.txt"], ".json or .csv"),
    (["--excitation-criterion", "d_optimal"], "for --excitation optimized only"),
    (["--excitation-condition-cap", "off"], "--excitation-condition-cap: for --excitation optimized only"),
])
def test_cli_excitation_errors(tmp_path, capsys, sample_trajectory, extra, pattern):
    traj = save_trajectory(tmp_path / "plan.csv", sample_trajectory, ["joint1", "joint2"])
    extra = [x.replace("TRAJ", str(traj)).replace("OUT", str(tmp_path)) for x in extra]
    status = main([str(PLANAR), "--source", "ideal", "--duration", "2", "--sample-rate", "100", "--no-plots",
                   "--output-dir", str(tmp_path / "out")] + extra)
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("error:") and pattern in err and "Traceback" not in err


# --- trajectory_publisher -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ros_context():
    rclpy = pytest.importorskip("rclpy")
    from rclpy.context import Context
    ctx = Context()
    rclpy.init(context=ctx)
    yield ctx
    rclpy.shutdown(context=ctx)


def _publisher(ctx, **params):
    from rclpy.parameter import Parameter
    from sysid_ros.trajectory_publisher import TrajectoryPublisher
    params = {"model": str(OPENARM), "autostart": False, **params}
    return TrajectoryPublisher(context=ctx, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])


@pytest.fixture(scope="module")
def openarm_file(tmp_path_factory):
    """A 2 s Fourier excitation of the OpenArm-class arm at 1 kHz, saved as CSV."""
    robot = load_robot(OPENARM)
    start = robot.joint_range.mean(axis=1)
    series = rest_to_rest_series(np.random.default_rng(2).normal(size=(7, 4)) * 0.05, start, 0.5)
    traj = series.trajectory(2.0, 1000.0)
    return save_trajectory(tmp_path_factory.mktemp("plan") / "openarm.csv", traj, robot.joint_names), traj


def test_publisher_plays_a_file_resampled_to_its_rate(ros_context, openarm_file):
    path, traj = openarm_file
    node = _publisher(ros_context, excitation="file", trajectory_file=str(path), rate_hz=500.0)
    try:
        assert node.error is None
        assert node.plan.time.shape == (1001,) and node.plan.time[-1] == pytest.approx(2.0)
        # every other 1 kHz sample is a 500 Hz sample: resampling keeps them exactly
        np.testing.assert_allclose(node.plan.q, traj.q[::2], atol=1e-12)
        np.testing.assert_allclose(node.plan.dq, traj.dq[::2], atol=1e-12)
    finally:
        node.destroy_node()


def test_publisher_plays_a_friction_sweep(ros_context):
    node = _publisher(ros_context, excitation="friction-sweep", rate_hz=250.0, max_velocity=0.5)
    try:
        assert node.error is None
        # every joint moves on its own, up to max_velocity and back to rest
        moving = np.abs(node.plan.dq) > 1e-9
        assert np.all(moving.sum(axis=1) <= 1) and set(np.flatnonzero(moving.any(axis=0))) == set(range(7))
        assert np.max(np.abs(node.plan.dq)) == pytest.approx(0.5)
        assert np.allclose(node.plan.dq[[0, -1]], 0)
    finally:
        node.destroy_node()


@pytest.mark.parametrize("params, pattern", [
    (dict(rate_hz=333.3), "cannot be played at rate_hz 333.3"),
    (dict(max_velocity=0.01), "above max_velocity"),
    (dict(trajectory_file=""), "needs parameter 'trajectory_file'"),
    (dict(trajectory_file="/nonexistent/plan.json"), "not found"),
])
def test_publisher_refuses_unusable_files(ros_context, openarm_file, params, pattern):
    path, _ = openarm_file
    node = _publisher(ros_context, **{"excitation": "file", "trajectory_file": str(path), "rate_hz": 500.0, **params})
    try:
        assert node.error is not None and pattern in node.error
        assert node.robot is None and node.start()[0] is False
    finally:
        node.destroy_node()
