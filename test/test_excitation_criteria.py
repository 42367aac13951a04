"""Design criteria and collision clearance of the optimized excitation.

Oracles: brute-force information matrices (a sum over rows, eigenvalues, the covariance's
payload block), NumPy's SVD, central finite differences for every gradient, and MuJoCo's
mj_geomDistance over every geom pair its collision filter admits.
"""
import mujoco
import numpy as np
import pytest

from arm_corpus import arm
from conftest import MODELS
from sysid_core.dynamics.friction import JointModel
from sysid_core.dynamics.model import load_robot
from sysid_core.excitation.clearance import Clearance
from sysid_core.excitation.criteria import (log_condition_bound, log_condition_scaled, log_det_information,
                                           weighted_condition)
from sysid_core.excitation.design import _Problem
from sysid_core.identification.identify import IdentificationConfig

N_JOINTS, SAMPLES, COLUMNS = 3, 40, 8


@pytest.fixture(scope="module")
def case():
    gen = np.random.default_rng(4)
    matrix = gen.standard_normal((SAMPLES * N_JOINTS, COLUMNS)) * gen.uniform(0.1, 10.0, COLUMNS)
    return matrix, gen.uniform(0.5, 2.0, N_JOINTS), gen.uniform(0.1, 5.0, COLUMNS)


def _information(matrix, row_weight, scale):
    """F~ as a sum over rows: (1 / G) sum_i w_i^2 phi_i phi_i', phi_i = row i / scale."""
    info = np.zeros((matrix.shape[1], matrix.shape[1]))
    for i, row in enumerate(matrix):
        phi = row / scale
        info += row_weight[i % N_JOINTS] ** 2 * np.outer(phi, phi)
    return info / SAMPLES


def test_d_optimality_is_the_mean_log_eigenvalue_of_the_information(case):
    matrix, row_weight, scale = case
    value, _ = log_det_information(matrix, row_weight, scale)
    assert value == pytest.approx(-np.mean(np.log(np.linalg.eigvalsh(_information(matrix, row_weight, scale)))),
                                  rel=1e-10)


def test_payload_criterion_is_the_information_left_about_the_columns_of_interest(case):
    matrix, row_weight, scale = case
    interest = np.array([0, 3, 4])
    value, _ = log_det_information(matrix, row_weight, scale, interest)
    # the covariance of the parameters of interest is the block of F^-1: its volume is what is left
    covariance = np.linalg.inv(_information(matrix, row_weight, scale))[np.ix_(interest, interest)]
    assert value == pytest.approx(np.log(np.linalg.det(covariance)) / 3, rel=1e-10)
    # every column of interest: the payload criterion is plain D-optimality
    everything, _ = log_det_information(matrix, row_weight, scale, np.arange(COLUMNS))
    assert everything == pytest.approx(log_det_information(matrix, row_weight, scale)[0], rel=1e-12)


def test_d_criteria_are_unit_free_up_to_a_constant(case):
    matrix, row_weight, scale = case
    # a column in other units (grams for kilograms) shifts the criterion, the scale undoes it
    units = np.ones(COLUMNS)
    units[2] = 1000.0
    shifted, _ = log_det_information(matrix * units, row_weight, scale)
    same, _ = log_det_information(matrix * units, row_weight, scale * units)
    assert same == pytest.approx(log_det_information(matrix, row_weight, scale)[0], rel=1e-12)
    assert shifted != pytest.approx(same)


def test_condition_criterion_is_the_scaled_condition_number(case):
    matrix, _, _ = case
    s = np.linalg.svd(matrix / np.linalg.norm(matrix, axis=0), compute_uv=False)
    assert log_condition_scaled(matrix)[0] == pytest.approx(np.log(s[0] / s[-1]), rel=1e-12)


@pytest.mark.parametrize("sharpness", [5.0, 30.0, 200.0])
def test_condition_bound_lies_between_the_log_condition_number_and_log_r_over_p_above_it(case, sharpness):
    matrix, _, _ = case
    s = np.linalg.svd(matrix / np.linalg.norm(matrix, axis=0), compute_uv=False)
    exact = np.log(s[0] / s[-1])
    bound, _ = log_condition_bound(matrix, sharpness)
    assert exact <= bound <= exact + np.log(COLUMNS) / sharpness
    # a column rescaled (other units) changes nothing: the bound is of the unit-norm columns
    units = np.ones(COLUMNS)
    units[2] = 1000.0
    assert log_condition_bound(matrix * units, sharpness)[0] == pytest.approx(bound, rel=1e-9)


def _criteria(case):
    matrix, row_weight, scale = case
    gen = np.random.default_rng(9)
    parts = [matrix * 0.3, gen.standard_normal(matrix.shape), gen.standard_normal(matrix.shape)]
    return {
        "d_optimal": ([matrix], lambda m: log_det_information(m[0], row_weight, scale)),
        "payload": ([matrix], lambda m: log_det_information(m[0], row_weight, scale, np.array([1, 2, 6]))),
        "condition": ([matrix], lambda m: log_condition_scaled(m[0])),
        "condition_bound": ([matrix], lambda m: log_condition_bound(m[0], 30.0)),
        "weighted": ([sum(parts)] + parts,
                     lambda m: weighted_condition(m, np.array([1.0, 0.5, 2.0]), (COLUMNS,) * 3, row_weight)),
    }


@pytest.mark.parametrize("name", ["d_optimal", "payload", "condition", "condition_bound", "weighted"])
def test_criterion_gradients_equal_central_differences(case, name):
    matrices, criterion = _criteria(case)[name]
    value, grads = criterion(matrices)
    grads = grads if isinstance(grads, list) else [grads]
    gen = np.random.default_rng(1)
    for _ in range(3):
        direction = [gen.standard_normal(m.shape) for m in matrices]
        h = 1e-6
        plus = criterion([m + h * d for m, d in zip(matrices, direction)])[0]
        minus = criterion([m - h * d for m, d in zip(matrices, direction)])[0]
        analytic = sum(np.sum(g * d) for g, d in zip(grads, direction))
        assert analytic == pytest.approx((plus - minus) / (2 * h), rel=1e-5, abs=1e-9)


def test_a_base_parameter_not_excited_makes_the_criteria_infinite(case):
    matrix, row_weight, scale = case
    flat = matrix.copy()
    flat[:, 3] = 0.0
    assert log_det_information(flat, row_weight, scale)[0] == np.inf
    assert log_condition_scaled(flat)[0] == np.inf
    assert log_condition_bound(flat, 30.0)[0] == np.inf


# --- the design problem's gradients with respect to the Fourier coefficients ---------------------

@pytest.mark.parametrize("scope, criterion, cap", [("terminal", "payload", None), ("full", "d_optimal", None),
                                                   ("full", "condition", None), ("full", "weighted", None),
                                                   ("full", "d_optimal", 3.0)])
def test_design_gradients_equal_central_differences(scope, criterion, cap):
    """The chain criterion -> regressor -> states -> coefficients (regressor derivatives by forward
    differences per joint and state) against central differences of the whole evaluation, for
    the criterion and every constraint (limits' usage, torques, clearance, the condition cap)."""
    robot = load_robot(MODELS / "planar_2r_vertical.xml")
    config = IdentificationConfig(scope=scope, joint_model=JointModel(("coulomb", "viscous")))
    start = np.array([0.3, -0.4])
    problem = _Problem(robot, config, criterion, np.array([1.0, 0.5, 2.0]), np.array([0.05, 0.02]), 4, 0.5, start,
                       robot.joint_range[:, 0] + 0.05, robot.joint_range[:, 1] - 0.05, np.full(2, 3.0),
                       np.full(2, 20.0), np.array([30.0, 10.0]), None, cap)
    x = problem.start(np.random.default_rng(2))
    grad, jac = problem.jac(x), problem.constraints_jac(x)
    assert jac.shape == (4 + (cap is not None), x.size)
    gen = np.random.default_rng(3)
    for _ in range(3):
        d = gen.standard_normal(x.size)
        d /= np.linalg.norm(d)
        h = 1e-6
        numeric = (problem.fun(x + h * d) - problem.fun(x - h * d)) / (2 * h)
        assert grad @ d == pytest.approx(numeric, rel=2e-4, abs=1e-7)
        numeric = (problem.constraints(x + h * d) - problem.constraints(x - h * d)) / (2 * h)
        np.testing.assert_allclose(jac @ d, numeric, rtol=2e-3, atol=1e-6)


# --- collision clearance ----------------------------------------------------------------------

def _admitted_pairs(model):
    """Geom pairs MuJoCo's collision filter admits, written from its documented rules: contype /
    conaffinity compatible, different weld bodies, not parent and child (unless the parent is the
    world), not an <exclude>d body pair."""
    weld = model.body_weldid
    excluded = {tuple(sorted(s)) for s in ((int(v) >> 16, int(v) & 0xFFFF) for v in model.exclude_signature)}
    pairs = []
    for g1 in range(model.ngeom):
        for g2 in range(g1 + 1, model.ngeom):
            if not ((model.geom_contype[g1] & model.geom_conaffinity[g2]) or
                    (model.geom_contype[g2] & model.geom_conaffinity[g1])):
                continue
            b1, b2 = model.geom_bodyid[g1], model.geom_bodyid[g2]
            w1, w2 = weld[b1], weld[b2]
            if w1 == w2 or tuple(sorted((int(b1), int(b2)))) in excluded:
                continue
            p1, p2 = weld[model.body_parentid[w1]], weld[model.body_parentid[w2]]
            if (w1 == p2 and w1 != 0) or (w2 == p1 and w2 != 0):
                continue
            pairs.append((g1, g2))
    return pairs


@pytest.mark.parametrize("name", ["ur10e", "iiwa14", "sawyer"])
def test_clearance_equals_mujocos_geom_distance(name):
    model = mujoco.MjModel.from_xml_path(str(arm(name).path))
    clearance = Clearance(model, 0.01, band=0.05)
    pairs = _admitted_pairs(model)
    assert clearance.active and pairs
    data = mujoco.MjData(model)
    gen = np.random.default_rng(0)
    q = gen.uniform(model.jnt_range[:, 0] * 0.6, model.jnt_range[:, 1] * 0.6, (25, model.nv))
    ceiling = clearance.clearance + clearance.band
    fromto = np.zeros(6)
    for qi, measured in zip(q, clearance.minimum(q)):
        data.qpos[:] = qi
        mujoco.mj_forward(model, data)
        truth = min([mujoco.mj_geomDistance(model, data, g1, g2, ceiling, fromto) for g1, g2 in pairs] + [ceiling])
        assert measured == pytest.approx(truth, abs=1e-6)


def test_clearance_gradient_equals_central_differences():
    model = mujoco.MjModel.from_xml_path(str(arm("ur10e").path))
    clearance = Clearance(model, 0.01)
    gen = np.random.default_rng(5)
    q = gen.uniform(model.jnt_range[:, 0] * 0.6, model.jnt_range[:, 1] * 0.6, (30, model.nv))
    samples, dist, grad = clearance.distances(q, gradient_below=np.inf)
    separated = np.flatnonzero(dist > 0)
    assert separated.size > 10
    h = 1e-6
    for k in gen.choice(separated, 8, replace=False):
        i = samples[k]
        before = clearance.pairs(q[i])
        index = [d for d, _, _ in before].index(dist[k])
        pair = before[index][1:]
        for j in range(model.nv):
            moved = []
            for sign in (1, -1):
                qj = q[i].copy()
                qj[j] += sign * h
                moved.append(next(d for d, g1, g2 in clearance.pairs(qj) if (g1, g2) == pair))
            # GJK's distances are exact to about 1e-11 m: the difference quotient to about 1e-5
            assert grad[k, j] == pytest.approx((moved[0] - moved[1]) / (2 * h), abs=1e-4)
