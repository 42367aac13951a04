"""The live model monitor against truth: MuJoCo's physics, mj_jac, Pinocchio.

The plant is the OpenArm-class arm in MuJoCo with what its model file does not know: armature
30 % above the file's, a Stribeck friction excess of half the Coulomb level at low speed, the
project's default measurement noise (q 1e-4 rad, dq 5e-3 rad/s, tau 0.02 N m); it is tracked by
PD + feed-forward (MIT mode, the nominal model's inverse dynamics as feed-forward). The model the
monitor uses is identified from a recording of that plant, written as an identification writes
it (params.json and the updated model) and loaded back as the node loads it. Every run it is
judged on is a new one (other seeds, other motions).

External forces and the obstacle need a MuJoCo loop of this file's own (``_run``): the
simulation wing's sources apply joint torques only and keep contacts off.
"""
import dataclasses

import mujoco
import numpy as np
import pytest
from scipy import signal

from conftest import ROBOTS
from sysid_core.dynamics.model import load_robot
from sysid_core.excitation.multisine import multisine
from sysid_core.identification.identify import IdentificationConfig, identify, on_hardware, predict_torque
from sysid_core.identification.residual import fit_residual_model
from sysid_core.online.live_model import load_live_model, nominal_live_model
from sysid_core.online.monitor import MonitorConfig, monitor_start, monitor_step
from sysid_core.online.observer import momentum_terms, noise_gain, observer_recursion, white_noise_level
from sysid_core.results.export import params_document, write_params_json
from sysid_core.results.urdf_export import write_updated_robot
from sysid_core.simulation import (MeasurementNoise, StribeckFriction, default_gains, measure, mit_torque,
                                   plant_model, simulate_tracking, simulation_timing)

RATE = 1000.0
NOISE = MeasurementNoise()
ROBOT = load_robot(ROBOTS / "openarm_class.xml")
KP, KD = default_gains(ROBOT.model)
# friction the model file does not have: a Stribeck peak of half the Coulomb level at rest
EXTRA_FRICTION = StribeckFriction(excess=0.5 * ROBOT.frictionloss, velocity=0.1)
ARMATURE_SCALE = 1.3  # the plant's rotors 30 % heavier than the file says
# the batch sizes a driver's stream arrives in: 1-50 samples
MAX_BATCH = 50


def _plant(path=ROBOTS / "openarm_class.xml", payload_kg=None, obstacle=None) -> mujoco.MjModel:
    """The plant: the arm of ``path`` with ARMATURE_SCALE times its armature; with
    ``payload_kg`` the payload body of openarm_class_payload.xml set to that mass (its inertia
    scaled alike, its centre of mass kept); with ``obstacle`` (centre (3,) m, radius m) a fixed
    sphere the arm's geoms collide with (they do not collide with each other)."""
    spec = mujoco.MjSpec.from_file(str(path))
    if obstacle is not None:
        for geom in spec.geoms:
            geom.contype, geom.conaffinity = 1, 0
        centre, radius = obstacle
        spec.worldbody.add_geom(name="obstacle", type=mujoco.mjtGeom.mjGEOM_SPHERE, size=[radius, 0, 0],
                                pos=list(centre), contype=0, conaffinity=1)
    model = spec.compile()
    model.dof_armature[:] *= ARMATURE_SCALE
    if payload_kg is not None:
        body = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, "payload")
        model.body_inertia[body] *= payload_kg / model.body_mass[body]
        model.body_mass[body] = payload_kg
    return model


def _tracked(model, seed, duration):
    """A multisine run of the plant ``model`` under PD + feed-forward (the simulation wing's
    source, contacts off): the Recording."""
    plan = multisine(ROBOT.joint_range, duration, RATE, seed=seed, max_velocity=1.5)
    feedforward = ROBOT.inverse_dynamics(plan.q, plan.dq, plan.ddq)
    return simulate_tracking(model, plan, feedforward, KP, KD, NOISE, seed=seed, joint_friction=EXTRA_FRICTION)


def _run(model, q_des, dq_des, ddq_des, seed, wrench=None, body=None, contacts=False, after_contact=None):
    """The plant ``model`` tracking the plan (N, n) under PD + feed-forward, stepped here: with
    ``wrench(t) -> (6,)`` (force N, torque N m, world frame) applied at ``body``'s centre of mass
    (xfrc_applied) and its joint torque J^T F from mj_jac at that point recorded per sample;
    with ``contacts`` MuJoCo's contacts on, the run ending ``after_contact`` s after the first.
    Returns (time (M,), measured q, dq, tau (M, n), truth (M, n) N m, first contact time s)."""
    timing = simulation_timing(model, RATE)
    plant = plant_model(model, timing)
    if contacts:
        plant.opt.disableflags &= ~int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
    data = mujoco.MjData(plant)
    data.qpos[:], data.qvel[:] = q_des[0], dq_des[0]
    feedforward = ROBOT.inverse_dynamics(q_des, dq_des, ddq_des)
    num, n = q_des.shape
    q, dq, tau, truth = (np.zeros((num, n)) for _ in range(4))
    jacp, jacr = np.zeros((3, n)), np.zeros((3, n))
    first, last = None, num
    for i in range(num):
        q[i], dq[i] = data.qpos, data.qvel
        tau[i] = mit_torque(q[i], dq[i], q_des[i], dq_des[i], feedforward[i], KP, KD)
        if wrench is not None:
            force = wrench(i / RATE)
            mujoco.mj_kinematics(plant, data)
            mujoco.mj_comPos(plant, data)
            mujoco.mj_jac(plant, data, jacp, jacr, data.xipos[body], body)
            truth[i] = jacp.T @ force[:3] + jacr.T @ force[3:]
            data.xfrc_applied[body] = force
        for _ in range(timing.substeps):
            data.qfrc_applied[:] = tau[i] - EXTRA_FRICTION(np.array(data.qvel))
            start = data.time
            mujoco.mj_step(plant, data)
            if contacts and first is None and data.ncon:
                # mj_step found the contact at the state it started from
                geoms = {mujoco.mj_id2name(plant, mujoco.mjtObj.mjOBJ_GEOM, g) for g in data.contact.geom[0]}
                assert "obstacle" in geoms, geoms
                first, last = start, min(num, i + 1 + int(after_contact * RATE))
        if i + 1 >= last:
            num = i + 1
            break
    gen = np.random.default_rng(seed)
    measured = (measure(q[:num], NOISE.q_std, 0.0, gen), measure(dq[:num], NOISE.dq_std, 0.0, gen),
                measure(tau[:num], NOISE.tau_std, 0.0, gen))
    return (np.arange(num) / RATE, *measured, truth[:num], first)


def _monitor(model, config, time, q, dq, tau, seed=0):
    """The stream through the monitor in batches of 1-MAX_BATCH samples (``seed`` draws them):
    (the per-sample outputs concatenated, as a dict, first sample excluded (it starts the
    monitor); [(batch end stamp, holds, drifting)]; the last state)."""
    sizes = np.random.default_rng(seed).integers(1, MAX_BATCH + 1, size=len(time))
    state = monitor_start(model, config, time[0], q[0], dq[0], tau[0])
    steps, ends, start = [], [], 1
    for size in sizes:
        if start >= len(time):
            break
        part = slice(start, start + int(size))
        state, step = monitor_step(model, config, state, time[part], q[part], dq[part], tau[part])
        steps.append(step)
        ends.append((time[part][-1], step.holds, step.drifting))
        start += int(size)
    fields = ("predicted", "external", "contact", "q", "dq", "ddq", "measured", "band", "dropped", "restarted")
    return {f: np.concatenate([getattr(s, f) for s in steps]) for f in fields}, ends, state


@pytest.fixture(scope="module")
def identified(tmp_path_factory):
    """The plant identified from a 10 s multisine (validated on 5 s), written and loaded back:
    (the IdentificationResult, the LiveModel the node would load)."""
    plant = _plant()
    result = identify(ROBOT, _tracked(plant, 1, 10.0), IdentificationConfig(), validation=_tracked(plant, 2, 5.0))
    out = tmp_path_factory.mktemp("identified")
    write_params_json(out / "params.json", params_document(result, ROBOT, "simulation"))
    write_updated_robot(out, ROBOT, result)
    return result, load_live_model(out / "params.json")


@pytest.fixture(scope="module")
def excitation(identified):
    """A 30 s multisine of the same plant at up to 1.5 rad/s (a seed of its own) through the
    monitor with the identified model and the default settings."""
    recording = _tracked(_plant(), 11, 30.0)
    model = identified[1]
    outputs, ends, state = _monitor(model, MonitorConfig(RATE), recording.time, recording.q, recording.dq,
                                    recording.tau)
    return recording, outputs, ends, state


# ------------------------------------------------------------------------------------------ prediction


def test_prediction_is_predict_torque_and_batching_changes_nothing(identified, excitation):
    """The prediction is identify.predict_torque of the identified result (as a real arm runs it)
    at the filtered state the monitor reports, and two splits of one stream into batches give
    the same outputs."""
    result, model = identified
    recording = excitation[0]
    stream = [a[:3000] for a in (recording.time, recording.q, recording.dq, recording.tau)]
    config = MonitorConfig(RATE)
    first, ends_first, state_first = _monitor(model, config, *stream, seed=1)
    second, ends_second, state_second = _monitor(model, config, *stream, seed=2)
    expected = predict_torque(ROBOT, on_hardware(ROBOT, result), first["q"], first["dq"], first["ddq"])
    scale = np.max(np.abs(expected))
    # the two evaluations differ in rounding only (another code path to the same sums)
    assert np.max(np.abs(first["predicted"] - expected)) <= 1e-9 * scale
    # the state it used is the whole stream through one Butterworth low-pass (SciPy, in one call,
    # started as if at rest on the first sample), ddq the backward difference of its velocity
    sos = signal.butter(config.filter_order, config.cutoff_hz, fs=RATE, output="sos")
    whole = np.hstack(stream[1:3])
    low, _ = signal.sosfilt(sos, whole, axis=0, zi=signal.sosfilt_zi(sos)[:, :, None] * whole[0])
    np.testing.assert_allclose(np.hstack([first["q"], first["dq"]]), low[1:], rtol=0, atol=1e-12)
    np.testing.assert_allclose(first["ddq"], np.diff(low[:, 7:], axis=0) * RATE, rtol=1e-9, atol=1e-9)
    assert len(ends_first) != len(ends_second)  # the splits differ
    for name, values in first.items():
        # bit for bit here; a vectorised kernel may round differently with a batch's length
        np.testing.assert_allclose(values.astype(float), second[name].astype(float), rtol=1e-12, atol=0,
                                   equal_nan=True, err_msg=name)
    np.testing.assert_allclose(state_first.rmse, state_second.rmse, rtol=1e-12, atol=0)
    assert ends_first[-1][1] == ends_second[-1][1]


def test_momentum_terms_are_pinocchios():
    """p = M(q) dq and beta = tau + C^T(q, dq) dq - g(q) - f(dq), with C^T dq worked out as
    Mdot dq - C dq, against Pinocchio's joint-space inertia (CRBA, the armature included),
    Christoffel-consistent Coriolis matrix and gravity on the same MJCF."""
    pin = pytest.importorskip("pinocchio")
    model = nominal_live_model(ROBOT)
    arm = pin.buildModelFromMJCF(str(ROBOTS / "openarm_class.xml"))
    data = arm.createData()
    rng = np.random.default_rng(3)
    low, high = ROBOT.joint_range[:, 0], ROBOT.joint_range[:, 1]
    q = rng.uniform(low, high, (40, ROBOT.n_joints))
    dq = rng.uniform(-2.0, 2.0, q.shape)
    dq[0] = 0.0  # at rest: beta is tau - g
    tau = rng.uniform(-5.0, 5.0, q.shape)
    p, beta = momentum_terms(model, q, dq, tau)
    for i in range(len(q)):
        mass = pin.crba(arm, data, q[i])
        mass = np.triu(mass) + np.triu(mass, 1).T  # the armature included (parsed from the MJCF)
        coriolis = pin.computeCoriolisMatrix(arm, data, q[i], dq[i])
        gravity = pin.computeGeneralizedGravity(arm, data, q[i])
        expected_beta = tau[i] + coriolis.T @ dq[i] - gravity - model.friction_torque(dq[i][None])[0]
        np.testing.assert_allclose(p[i], mass @ dq[i], rtol=0, atol=1e-9 * max(1.0, np.abs(mass @ dq[i]).max()))
        # the central difference of M errs by O(h^2) (h = 1e-5 rad): far below 1e-7 N m
        np.testing.assert_allclose(beta[i], expected_beta, rtol=0, atol=1e-7)


def test_white_noise_level_of_a_noisy_smooth_signal():
    """The noise level from second differences: Gaussian noise of known level on a smooth motion
    with an impact (a step far above the noise) the trim leaves out, within 10 %: four times the
    scatter of a level from 2000 second differences (about 2 %, their neighbours correlated)."""
    rng = np.random.default_rng(4)
    t = np.arange(2000) / RATE
    level = np.array([1e-3, 2e-4])
    motion = np.column_stack([0.3 * np.sin(2 * np.pi * 0.7 * t), 0.1 * np.cos(2 * np.pi * 1.3 * t)])
    motion[1200:] += 0.05
    noisy = motion + level * rng.standard_normal(motion.shape)
    found = white_noise_level(np.diff(noisy, 2, axis=0))
    np.testing.assert_allclose(found, level, rtol=0.1)


def test_a_residual_model_is_in_the_prediction(identified, excitation):
    """With a residual model (here one fitted to a position ripple) the prediction is the
    LiveModel's torque with its correction, at the filtered state."""
    model = identified[1]
    recording = excitation[0]
    q, dq = recording.q[:3000], recording.dq[:3000]
    ripple = 0.2 * np.sin(3.0 * q) + 0.01 * np.random.default_rng(6).standard_normal(q.shape)
    residual = fit_residual_model(ROBOT.joint_names, q, dq, ripple, components=(1, 2))
    assert any(joint.applied for joint in residual.joints)
    corrected = dataclasses.replace(model, residual=residual)
    stream = [a[:1500] for a in (recording.time, recording.q, recording.dq, recording.tau)]
    outputs, _, _ = _monitor(corrected, MonitorConfig(RATE), *stream)
    expected = corrected.torque(outputs["q"], outputs["dq"], outputs["ddq"])
    np.testing.assert_allclose(outputs["predicted"], expected, rtol=1e-12, atol=1e-12)
    assert np.max(np.abs(expected - model.torque(outputs["q"], outputs["dq"], outputs["ddq"]))) > 0.05


def test_observer_noise_gain():
    """White noise on p reaches the observer's estimate with the standard deviation
    noise_gain(K) times its own (the band's noise term), at K = 20 and 200 1/s: within the
    scatter of a standard deviation over 20000 samples (about 1 %, 4 % allowed)."""
    rng = np.random.default_rng(7)
    num, level = 20000, 1e-3
    for gain in (20.0, 200.0):
        p = level * rng.standard_normal((num, 2))
        r = observer_recursion(np.zeros(2), np.zeros(2), np.zeros(2), p, np.zeros((num, 2)), np.full(num, 1 / RATE),
                               gain)
        found = np.std(r[1000:], axis=0)
        np.testing.assert_allclose(found, noise_gain(gain, RATE) * level, rtol=0.04)


# ------------------------------------------------------------------------------------------ external torque


def test_external_torque_follows_the_applied_wrench(identified):
    """A smooth bump of 8.8 N (1 s, sin^2) on the wrist's link while the arm follows a multisine:
    the estimate against J^T F (mj_jac at the body's centre of mass, where xfrc_applied acts)
    passed through the observer's own first-order filter (gain K, the same step rule), on every
    joint that carries a meaningful share, at least a tenth of the largest joint's peak: max
    |error| over the bump and its decay <= 10 % of that joint's peak. (A joint carrying a few
    percent of it sees a peak of a few model errors sigma_j: no estimate from this model can
    tell a tenth of that.)"""
    model = identified[1]
    config = MonitorConfig(RATE)
    plan = multisine(ROBOT.joint_range, 4.0, RATE, seed=21, max_velocity=1.0)
    force = np.array([5.0, -4.0, 6.0, 0.0, 0.0, 0.0])
    begin, width = 1.5, 1.0

    def wrench(t):
        s = (t - begin) / width
        return force * np.sin(np.pi * s) ** 2 if 0.0 <= s <= 1.0 else 0.0 * force

    plant = _plant()
    body = mujoco.mj_name2id(plant, mujoco.mjtObj.mjOBJ_BODY, "link7")
    time, q, dq, tau, truth, _ = _run(plant, plan.q, plan.dq, plan.ddq, 22, wrench, body)
    outputs, _, _ = _monitor(model, config, time, q, dq, tau)
    # the truth through the observer's filter: over each step the torque applied from the
    # sample before (held by the simulation), r_k = e^(-K dt) r_(k-1) + (1 - e^(-K dt)) tau_(k-1)
    decay = np.exp(-config.observer_gain / RATE)
    lagged = np.zeros_like(truth)
    for k in range(1, len(truth)):
        lagged[k] = decay * lagged[k - 1] + (1.0 - decay) * truth[k - 1]
    window = (time[1:] >= begin) & (time[1:] <= begin + width + 3.0 / config.observer_gain)
    peak = np.max(np.abs(truth), axis=0)
    carrying = peak >= 0.1 * peak.max()
    error = np.max(np.abs(outputs["external"] - lagged[1:])[window], axis=0)
    assert carrying.sum() >= 4, peak
    assert np.all(error[carrying] <= 0.1 * peak[carrying]), (error / peak, peak)
    # a push of several N m is a contact (the band is tenths of N m), and it ends with the push:
    # cleared once every joint is back within half its band (3 s_j), where this model's estimate
    # stays nearly all the time without contact
    assert outputs["contact"][window].any()
    assert not outputs["contact"][(time[1:] < begin) | (time[1:] > begin + width + 0.5)].any()


# ------------------------------------------------------------------------------------------ contact


def _sweep(duration):
    """Joint 1 swept from 0 to 1.2 rad in ``duration`` s (quintic, from rest to rest) after
    0.5 s at rest, the others held at a bent pose: (q, dq, ddq) (N, n) and the pose."""
    pose = np.array([0.0, 0.3, 0.0, 0.6, 0.0, 0.0, 0.0])
    t = np.arange(int((duration + 1.0) * RATE)) / RATE
    s = np.clip((t - 0.5) / duration, 0.0, 1.0)
    q, dq, ddq = np.tile(pose, (len(t), 1)), np.zeros((len(t), 7)), np.zeros((len(t), 7))
    q[:, 0] = 1.2 * (10 * s ** 3 - 15 * s ** 4 + 6 * s ** 5)
    dq[:, 0] = 1.2 * (30 * s ** 2 - 60 * s ** 3 + 30 * s ** 4) / duration
    ddq[:, 0] = 1.2 * (60 * s - 180 * s ** 2 + 120 * s ** 3) / duration ** 2
    return q, dq, ddq, pose


@pytest.mark.parametrize("duration", [2.0, 8.0], ids=["1.1 rad/s", "0.27 rad/s"])
def test_contact_within_20_ms_of_a_collision(identified, duration):
    """A fixed sphere (4 cm) where the flange passes at joint 1 = 0.7 rad: contact is flagged,
    by the sample stamps, within 20 ms of MuJoCo's first contact between the arm and the
    sphere, and not before it; at a brisk and at a slow sweep."""
    model = identified[1]
    q_des, dq_des, ddq_des, pose = _sweep(duration)
    data = mujoco.MjData(ROBOT.model)
    data.qpos[:] = pose
    data.qpos[0] = 0.7
    mujoco.mj_kinematics(ROBOT.model, data)
    centre = data.site_xpos[mujoco.mj_name2id(ROBOT.model, mujoco.mjtObj.mjOBJ_SITE, "flange_site")].copy()
    plant = _plant(obstacle=(centre, 0.04))
    time, q, dq, tau, _, first = _run(plant, q_des, dq_des, ddq_des, 31, contacts=True, after_contact=0.1)
    assert first is not None and first > 1.0  # the arm reached the sphere while sweeping
    outputs, _, _ = _monitor(model, MonitorConfig(RATE), time, q, dq, tau)
    flagged = time[1:][outputs["contact"]]
    assert flagged.size and flagged[0] >= first, (flagged[:3], first)
    assert flagged[0] - first <= 0.020, (flagged[0], first)


def test_no_contact_during_an_excitation(excitation):
    """A whole 30 s multisine with the identified model: contact never raised, once the band is
    established (the momentum's noise known after the first block of 0.2 s)."""
    recording, outputs, _, _ = excitation
    assert np.all(np.isfinite(outputs["band"][int(0.2 * RATE):]))
    assert not outputs["contact"].any(), recording.time[1:][outputs["contact"]][:5]


def test_a_model_without_validation_figures_needs_sigma(excitation):
    """A nominal model has no sigma: monitor_start refuses it unless the config gives one."""
    recording = excitation[0]
    nominal = nominal_live_model(ROBOT)
    with pytest.raises(ValueError, match="sigma"):
        monitor_start(nominal, MonitorConfig(RATE), recording.time[0], recording.q[0], recording.dq[0],
                      recording.tau[0])
    config = MonitorConfig(RATE, sigma=np.full(ROBOT.n_joints, 0.5))
    state = monitor_start(nominal, config, recording.time[0], recording.q[0], recording.dq[0], recording.tau[0])
    _, step = monitor_step(nominal, config, state, recording.time[1:20], recording.q[1:20], recording.dq[1:20],
                           recording.tau[1:20])
    assert step.predicted.shape == (19, ROBOT.n_joints) and np.all(np.isfinite(step.external))


# ------------------------------------------------------------------------------------------ stamps


def test_stamps_going_back_are_dropped_and_a_gap_restarts(identified, excitation):
    """A stream with a repeated stamp, one going back and a non-finite sample gives, for every
    other sample, exactly what the clean stream gives; the bad ones repeat the sample before.
    A 100 ms hole restarts the stream: outputs stay finite, the estimate is held across it, and
    no contact is raised (the arm touched nothing)."""
    model = identified[1]
    recording = excitation[0]
    time, q, dq, tau = (np.array(a[:2000]) for a in (recording.time, recording.q, recording.dq, recording.tau))
    config = MonitorConfig(RATE)
    clean, _, _ = _monitor(model, config, time, q, dq, tau)
    bad = [500, 900, 1300]
    insert = np.searchsorted(np.arange(len(time)), bad)
    time_b = np.insert(time, insert, [time[499], time[899] - 0.0005, time[1299] + 0.0001])
    q_b = np.insert(q, insert, [q[499], q[899], np.full(7, np.nan)], axis=0)
    dq_b, tau_b = np.insert(dq, insert, dq[bad], axis=0), np.insert(tau, insert, tau[bad], axis=0)
    dirty, _, _ = _monitor(model, config, time_b, q_b, dq_b, tau_b, seed=5)
    kept = ~dirty["dropped"]
    assert dirty["dropped"].sum() == 3
    for name in ("predicted", "external", "contact", "q", "dq", "ddq", "band"):
        np.testing.assert_allclose(dirty[name][kept].astype(float), clean[name].astype(float), rtol=1e-12, atol=0,
                                   equal_nan=True, err_msg=name)
        where = np.flatnonzero(dirty["dropped"])
        np.testing.assert_array_equal(dirty[name][where], dirty[name][where - 1], err_msg=name)

    hole = (time < 1.0) | (time >= 1.1)
    gapped, _, _ = _monitor(model, config, time[hole], q[hole], dq[hole], tau[hole])
    restart = np.flatnonzero(gapped["restarted"])
    assert restart.size == 1
    assert all(np.all(np.isfinite(v)) for k, v in gapped.items() if k != "band")
    np.testing.assert_array_equal(gapped["external"][restart[0]], gapped["external"][restart[0] - 1])
    assert not gapped["contact"].any()


# ------------------------------------------------------------------------------------------ drift


def test_the_right_model_holds_through_an_excitation(excitation):
    """With the model identified on this plant, the running RMSE stays within its band for the
    whole 30 s: ``holds`` at every batch end."""
    _, _, ends, state = excitation
    assert all(holds for _, holds, _ in ends), [t for t, holds, _ in ends if not holds][:3]


@pytest.mark.parametrize("payload_kg", [0.2, 0.5])
def test_an_unknown_payload_breaks_the_model(identified, payload_kg):
    """The same plant with a payload under the flange that the model does not know: ``holds``
    turns False after drift_time_s, within one drift window more (an error at least 1.6 times
    the band crosses it within half a window of a mean square starting from 0; this one is
    3-8 times it), and stays False."""
    model = identified[1]
    config = MonitorConfig(RATE)
    recording = _tracked(_plant(ROBOTS / "openarm_class_payload.xml", payload_kg), 12, 5.0)
    _, ends, _ = _monitor(model, config, recording.time, recording.q, recording.dq, recording.tau)
    holds = np.array([h for _, h, _ in ends])
    stamps = np.array([t for t, _, _ in ends]) - recording.time[0]
    broken = np.flatnonzero(~holds)
    assert broken.size, "the model was never found to drift"
    assert config.drift_time_s <= stamps[broken[0]] <= config.drift_time_s + config.drift_window_s, stamps[broken[0]]
    assert not holds[broken[0]:].any()
    assert ends[-1][2][:4].any()  # the shoulder and elbow carry the payload's weight
