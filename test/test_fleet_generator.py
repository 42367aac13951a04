"""The generated fleet (test/fleet_generator.py): what it records is what its truth says.

Oracles: Pinocchio's RNEA of the robot's own model file (URDF or MJCF) with the payload's
standard parameters added to the terminal body, plus the truth's armature and friction law (an
implementation independent of MuJoCo, of arm_corpus.with_payload's XML and of the generator);
the excitation's plan (what a noise-free recording must hold exactly); the noise model's own
numbers; the manifest read back with yaml.safe_load and the recordings with the project's readers.
"""
import datetime

import numpy as np
import pinocchio as pin
import pytest
import yaml

import fleet_generator as fg
from sysid_core.dynamics.model import load_robot
from sysid_core.identification.identify import IdentificationConfig, identify
from sysid_core.identification.recording_files import read_recordings

ROBOTS = len(fg.ARM_NAMES)  # one of each arm: the URDF robot, the split date and the bag robot among them
# The day-to-day spread of an identified friction level the fleet's drift test is designed for
# (a 10 %/day rise found within two days): the generator's data must identify within it.
DAY_TO_DAY = 0.02


@pytest.fixture(scope="module")
def noisy(tmp_path_factory):
    return fg.generate_fleet(tmp_path_factory.mktemp("noisy") / "fleet", robots=ROBOTS, days=2)


@pytest.fixture(scope="module")
def exact(tmp_path_factory):
    return fg.generate_fleet(tmp_path_factory.mktemp("exact") / "fleet", robots=ROBOTS, days=2, noise=False)


def _files(truth, day):
    """Each file of a day read alone: [(absolute times (N,) s, Recording)], in time order."""
    out = []
    for path in truth.recordings[day]:
        loaded = read_recordings([path], truth.joint_names)
        out.append((loaded.origins[0] + loaded.recording.time, loaded.recording))
    return out


def _plan_rows(fleet, files):
    """Each file's rows of the day's plan, from its times (the first sample is the plan's first)."""
    first = files[0][0][0]
    return [np.round((times - first) * fleet.rate_hz).astype(int) for times, _ in files]


def _pinocchio_model(truth):
    """Pinocchio's model of the robot's file with the payload welded to its terminal body (the
    truth's parameters, expressed in the terminal joint's frame) and no armature of its own."""
    path = str(truth.model)
    model = pin.buildModelFromUrdf(path) if truth.urdf else pin.buildModelFromMJCF(path)
    model.armature[:] = 0.0
    frame = model.frames[model.getFrameId(truth.terminal_body)]
    m, hx, hy, hz, ixx, ixy, ixz, iyy, iyz, izz = truth.payload
    payload = pin.Inertia.FromDynamicParameters(np.array([m, hx, hy, hz, ixx, ixy, iyy, ixz, iyz, izz]))
    model.inertias[frame.parentJoint] = model.inertias[frame.parentJoint] + frame.placement.act(payload)
    assert [model.names[j] for j in range(1, model.njoints)] == list(truth.joint_names)
    assert model.nq == model.nv == len(truth.joint_names)
    return model


def test_recorded_torque_is_the_plants_inverse_dynamics_plus_its_friction(exact):
    """Noise off: every file holds the day's plan exactly (q, dq at its own times, 1/rate apart;
    no acceleration), and its torque is Pinocchio's RNEA of the model file with the payload
    added, plus armature ddq and the day's coulomb sign(dq) + viscous dq, on every robot and day
    (the URDF robot's frames included). Tolerance: round-off, 1e-9 of each joint's largest
    torque (the smallest friction term is ~1e-3 of it; the two libraries agree to ~1e-14)."""
    for truth in exact.robots:
        model = _pinocchio_model(truth)
        data = model.createData()
        for day in range(len(exact.dates)):
            plan = fg.day_plan(truth, day, exact.seconds, exact.rate_hz)
            files = _files(truth, day)
            for (times, recording), rows in zip(files, _plan_rows(exact, files)):
                assert recording.ddq is None
                # epoch seconds as doubles: 2.4e-7 s apart
                np.testing.assert_allclose(np.diff(times), 1.0 / exact.rate_hz, rtol=0, atol=1e-6)
                np.testing.assert_array_equal(recording.q, plan.q[rows])
                np.testing.assert_array_equal(recording.dq, plan.dq[rows])
                q, dq, ddq = plan.q[rows], plan.dq[rows], plan.ddq[rows]
                rigid = np.array([pin.rnea(model, data, *state) for state in zip(q, dq, ddq)])
                oracle = (rigid + truth.armature * ddq + truth.daily_coulomb[day] * np.sign(dq)
                          + truth.daily_viscous[day] * dq)
                scale = np.abs(oracle).max(axis=0)
                np.testing.assert_allclose(recording.tau, oracle, rtol=0, atol=1e-9 * scale.max(),
                                           err_msg=f"{truth.id} day {day}")
                assert np.all(np.abs(recording.tau - oracle) <= 1e-9 * scale), f"{truth.id} day {day}"


def test_measurement_noise_is_what_the_generator_declares(noisy, exact):
    """The same seed with and without noise: the same plan and truth. Noisy position and velocity
    are multiples of their resolution, within half of it plus 6 sigma of the plan; the torque's
    error has zero mean and the standard deviation of TORQUE_NOISE of the joint's RMS torque with
    the torque quantum's uniform rounding added (within 10 %: the sample standard deviation of a
    file's 2000-4000 samples scatters by 1.1-1.6 %)."""
    noise = fg.NOISE
    for clean, dirty in zip(exact.robots, noisy.robots):
        np.testing.assert_array_equal(clean.payload, dirty.payload)
        np.testing.assert_array_equal(clean.daily_coulomb, dirty.daily_coulomb)
        quantum = 2.0 * fg.TORQUE_RANGE * dirty.scale / 2**fg.TORQUE_BITS
        for day in range(len(noisy.dates)):
            reference = _files(clean, day)
            rms = np.sqrt(np.mean(np.concatenate([r.tau for _, r in reference]) ** 2, axis=0))
            for (_, truth), (_, measured) in zip(reference, _files(dirty, day)):
                for name, resolution, std in (("q", noise.q_resolution, noise.q_std),
                                              ("dq", noise.dq_resolution, noise.dq_std)):
                    value, exact_value = getattr(measured, name), getattr(truth, name)
                    np.testing.assert_allclose(value / resolution, np.round(value / resolution), atol=1e-6)
                    assert np.abs(value - exact_value).max() <= resolution / 2 + 6 * std, name
                error = measured.tau - truth.tau
                expected = np.sqrt((fg.TORQUE_NOISE * rms) ** 2 + quantum**2 / 12)
                np.testing.assert_allclose(error.std(axis=0), expected, rtol=0.1, err_msg=clean.id)
                assert np.all(np.abs(error.mean(axis=0)) <= 6 * expected / np.sqrt(len(error))), clean.id


def test_the_manifest_lists_every_file_of_a_self_contained_fleet(noisy):
    """yaml.safe_load reads it; every path is relative and exists inside the fleet directory; each
    robot has one date per day (as truth), its model loads and names the recordings' joints; a
    URDF, a rosbag2 MCAP robot and a date of two files are among them; every file's stamps fall on
    its date, and the split date's two files are separate stretches, the second starting
    SPLIT_GAP_S after the first ends."""
    document = yaml.safe_load(noisy.manifest.read_text())
    assert document["options"] == {"scope": "terminal"}
    assert [entry["id"] for entry in document["robots"]] == [truth.id for truth in noisy.robots]
    root = noisy.manifest.parent
    for entry, truth in zip(document["robots"], noisy.robots):
        model = root / entry["model"]
        assert not entry["model"].startswith("/") and model.resolve() == truth.model.resolve()
        assert model.resolve().is_relative_to(root.resolve())
        robot = load_robot(model)
        assert robot.joint_names == truth.joint_names and robot.terminal_body == truth.terminal_body
        listed = [(root / item["path"], item["date"]) for item in entry["recordings"]]
        assert all(isinstance(date, datetime.date) for _, date in listed)
        assert sorted({date for _, date in listed}) == list(noisy.dates)
        assert [path.resolve() for path, _ in listed] == [p.resolve() for day in truth.recordings for p in day]
        for path, date in listed:
            assert path.exists() and path.resolve().is_relative_to(root.resolve())
            times = read_recordings([path], robot.joint_names)
            stamps = times.origins[0] + times.recording.time[[0, -1]]
            assert [datetime.datetime.fromtimestamp(t, datetime.timezone.utc).date() for t in stamps] == [date, date]
    assert any(truth.urdf for truth in noisy.robots)
    bags = [path for truth in noisy.robots for day in truth.recordings for path in day if path.is_dir()]
    assert bags and all(list(path.glob("*.mcap")) and (path / "metadata.yaml").is_file() for path in bags)
    split = [(truth, day) for truth in noisy.robots for day, files in enumerate(truth.recordings) if len(files) > 1]
    assert len(split) == 1
    (first_times, _), (second_times, _) = _files(*split[0])
    gap = second_times[0] - first_times[-1]
    assert fg.SPLIT_GAP_S <= gap <= fg.SPLIT_GAP_S + 1.0 / noisy.rate_hz + 1e-6
    assert len(read_recordings(split[0][0].recordings[split[0][1]], split[0][0].joint_names).stretches) == 2


def _std(result, name):
    names = result.base.names
    assert name in names, f"{name} is not a base parameter of its own"
    return float(result.estimate.std[names.index(name)])


def test_a_healthy_day_identifies_to_its_friction(noisy):
    """Day 0 of each arm, as sysid-fleet identifies a period (identify() with the default
    configuration, the last 20 % held out): verdict good, and each joint's Coulomb and viscous
    level within 3 sigma of that day's truth, sigma = hypot(reported standard deviation,
    DAY_TO_DAY of the level). The reported one covers the torque noise only: the velocity's
    quantisation and noise (errors in the regressor) add an error it does not include, 0.1-2 %
    of the level (bench/fleet_generator.py: up to ~25 reported sigma on joints whose torque is
    mostly friction and which report 0.05-0.4 %), bounded by the day-to-day spread the fleet
    requires. A 10 % error in the recorded Coulomb level fails this by 3.7-5 sigma."""
    for truth in noisy.robots:
        robot = load_robot(truth.model)
        head, tail = read_recordings(truth.recordings[0], robot.joint_names).recording.split(0.2)
        result = identify(robot, head, IdentificationConfig(), validation=tail)
        assert result.verdict.level == "good", (truth.id, result.verdict.reasons)
        for term, actual in (("coulomb", truth.daily_coulomb[0]), ("viscous", truth.daily_viscous[0])):
            found = getattr(result, term)
            sigma = np.hypot([_std(result, f"{j}.{term}") for j in robot.joint_names], DAY_TO_DAY * actual)
            assert np.all(np.abs(found - actual) <= 3 * sigma), (truth.id, term, (found - actual) / sigma)


def test_a_drifting_joint_is_identified_higher_on_the_last_day(tmp_path):
    """The default fleet's first drift (arm-02's joint2 Coulomb, +10 %/day from day 6): only that
    term of that joint changes, as Drift says; identified on day 0 and day 13, its level rose by
    the truth's factor (1.8) within 3 sigma of two days' DAY_TO_DAY spread, far beyond what
    noise could give (1 + 3 sqrt(2) DAY_TO_DAY)."""
    fleet = fg.generate_fleet(tmp_path / "fleet", robots=2, days=14)
    truth = fleet.robots[1]
    drift = fg.DRIFTS[1]
    assert (truth.drift.joint, truth.drift.term) == (truth.joint_names[drift.joint], drift.term)
    assert truth.drift.since == fleet.dates[drift.start]
    expected = truth.coulomb[drift.joint] * (1 + drift.rate * np.maximum(0, np.arange(14) - drift.start + 1))
    np.testing.assert_allclose(truth.daily_coulomb[:, drift.joint], expected, rtol=1e-15)
    assert truth.daily_coulomb[drift.start - 1, drift.joint] == truth.coulomb[drift.joint]
    others = np.arange(len(truth.joint_names)) != drift.joint
    np.testing.assert_array_equal(truth.daily_coulomb[:, others], np.tile(truth.coulomb[others], (14, 1)))
    np.testing.assert_array_equal(truth.daily_viscous, np.tile(truth.viscous, (14, 1)))
    assert fleet.robots[0].drift is None

    robot = load_robot(truth.model)
    levels = []
    for day in (0, 13):
        head, tail = read_recordings(truth.recordings[day], robot.joint_names).recording.split(0.2)
        levels.append(identify(robot, head, IdentificationConfig(), validation=tail).coulomb[drift.joint])
    rise, actual = levels[1] / levels[0], expected[13] / expected[0]
    spread = 3 * np.sqrt(2) * DAY_TO_DAY
    assert rise > 1 + spread
    assert abs(rise / actual - 1) <= spread


def test_a_seed_makes_the_same_fleet_byte_for_byte(tmp_path):
    """Same seed: identical files (CSV, the MCAP bag, the manifest) and truth; another seed: other
    payloads, friction and recordings."""
    fleets = [fg.generate_fleet(tmp_path / name, robots=3, days=1, seed=seed)
              for name, seed in (("a", 0), ("b", 0), ("c", 1))]
    files = [sorted(p.relative_to(f.directory) for p in f.directory.rglob("*") if p.is_file()) for f in fleets]
    assert files[0] == files[1] == files[2]
    assert any(path.suffix == ".mcap" for path in files[0])
    same = [(fleets[0].directory / p).read_bytes() == (fleets[1].directory / p).read_bytes() for p in files[0]]
    assert all(same)
    differ = [(fleets[0].directory / p).read_bytes() != (fleets[2].directory / p).read_bytes() for p in files[0]
              if p.suffix in (".csv", ".mcap")]  # a bag's metadata.yaml holds counts and times only
    assert all(differ)
    for a, b, c in zip(*(f.robots for f in fleets)):
        for field in ("payload", "coulomb", "viscous", "armature", "daily_coulomb", "daily_viscous"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
        assert not np.array_equal(a.payload, c.payload) and not np.array_equal(a.coulomb, c.coulomb)
