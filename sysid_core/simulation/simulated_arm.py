"""The arm a simulator node drives: MuJoCo stepped one control period at a time under the
commands it was given, measured as its drives would report it.

Each control period the arm reads its state, computes the joint torque for the command in
force (a streamed command, or a ``Preview`` sampled at that period), reports state and
torque with noise and quantisation, and holds the torque through the MuJoCo steps of the
period. The law: with ``kp`` and ``kd`` the MIT mode of the drives, tau = kp (q_des - q)
+ kd (dq_des - dq) + tau_ff; without them the computed-torque feedback of
``ComputedTorque.feedback_torque`` (stable on any arm). A joint whose command is older than
``command_timeout_s`` of simulated time falls back to damping only (q_des = q, dq_des = 0, no
feed-forward), as the Damiao bridge does; before its first command a joint holds the initial
pose with the law and no feed-forward. A streamed command whose position is NaN has no position
target (as the Damiao bridge reads it): each period that joint's q_des is its own measured
position, so the law's position term vanishes (kp's in MIT mode, the position feedback under
computed torque) and the joint is driven by its velocity target and feed-forward alone; the
watchdog treats it like any command. A preview commands every joint at each period it
covers; after its last knot the arm holds that knot, and the hold ages like a streamed
command from there.

``advance(count)`` simulates ``count`` periods and returns their samples as one
``StateBlock``: the per-period work is MuJoCo's and the control law's, the rest (targets,
watchdog, noise) is done once per block, so a caller publishing blocks pays little per sample.

An arm with elastic transmissions (``elastic``: ``simulation.elastic.elastic_plant``) is driven
on its motor side, as a servo drive closes its loop on its own encoder: the MIT law on the rotor
state, evaluated at every MuJoCo step (a drive's loop runs far faster than the bus, and a rotor
on a spring moves too fast for a torque held over a period), the commanded targets held over the
period. Its samples carry the link side's q and dq, the motor side's position ``motor_q`` and the
drive's torque. A watchdog's damping then acts on the rotor as well. ``gearbox`` adds on the
rotor what a real gearbox does beyond the model (``elastic.Gearbox``).
"""
from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from ..errors import DataError
from ..excitation.preview import Preview
from . import (ComputedTorque, MeasurementNoise, _counted_divergence, measure, mit_torque, mujoco_warnings,
               plant_model, simulation_timing, step)
from .elastic import ElasticPlant, Gearbox


@dataclass(frozen=True, eq=False)
class StateBlock:
    """Consecutive samples as the drives report them: ``stamp_ns`` (m,) int64 simulated time of
    each; ``q`` (m, n) rad, ``dq`` (m, n) rad/s, ``tau`` (m, n) N m, noise and quantisation applied;
    ``motor_q`` (m, n) rad, the motor-side positions of an elastic arm (None for a rigid one),
    with the position's noise."""

    stamp_ns: np.ndarray
    q: np.ndarray
    dq: np.ndarray
    tau: np.ndarray
    motor_q: np.ndarray | None = None

    def __len__(self) -> int:
        return self.stamp_ns.shape[0]


class SimulatedArm:
    """A MuJoCo arm under joint commands, one control period at a time (see the module docstring).

    model: the arm's MjModel (its plant is simulated: ``plant_model``); rate_hz: control and
    sample rate; kp, kd: (n,) MIT gains, or both None for computed-torque feedback; noise:
    the measurement noise; seed: its generator's; initial_positions (n,) rad (default the
    model's qpos0 within the joint ranges); command_timeout_s: simulated seconds a command is
    tracked; elastic: the arm's elastic plant (``elastic_plant`` of ``model``'s file, for this
    rate and these gains), which needs the MIT gains; gearbox: on an elastic arm, the gearbox's
    own torques on the rotor. Raises ValueError for bad arguments.

    The simulated clock starts one period in (ROS reads time 0 as "no time yet"): the sample
    of period p is stamped (p + 1) period_ns.
    """

    def __init__(self, model: mujoco.MjModel, joint_range: np.ndarray, rate_hz: float, *, kp=None, kd=None,
                 noise: MeasurementNoise = MeasurementNoise(), seed=0, initial_positions=None,
                 command_timeout_s: float = 0.1, elastic: ElasticPlant | None = None,
                 gearbox: Gearbox | None = None):
        if not (np.isfinite(rate_hz) and rate_hz > 0):
            raise ValueError(f"rate_hz must be > 0, got {rate_hz}")
        if (kp is None) != (kd is None):
            raise ValueError("set both kp and kd (the MIT law) or neither (computed-torque feedback)")
        self.elastic = elastic
        if gearbox is not None and elastic is None:
            raise ValueError("a gearbox acts between a rotor and a link: give the elastic plant")
        self._gearbox = gearbox
        if elastic is None:
            self.timing = simulation_timing(model, rate_hz)
            self._model = plant_model(model, self.timing)
            n = self._model.nv
            self._link_qpos = self._link_dof = np.arange(n)
        else:
            if kp is None:
                raise ValueError("an elastic arm is driven in MIT mode on its motor side: give kp and kd")
            n = len(elastic.joint_names)
            if n != model.nv or abs(elastic.timing.sample_rate - rate_hz) > 1e-9 * rate_hz:
                raise ValueError(f"the elastic plant has {n} joints at {elastic.timing.sample_rate:g} Hz, the arm "
                                 f"{model.nv} at {rate_hz:g} Hz")
            self.timing, self._model = elastic.timing, elastic.model
            self._link_qpos, self._link_dof = elastic.link_qpos, elastic.link_dof
        self.kp = None if kp is None else np.asarray(kp, dtype=float)
        self.kd = None if kd is None else np.asarray(kd, dtype=float)
        if self.kp is None:
            self._control = ComputedTorque(model, rate_hz).feedback_torque
        else:
            kp_, kd_ = self.kp, self.kd
            self._control = lambda q, dq, q_des, dq_des, tau_ff: mit_torque(q, dq, q_des, dq_des, tau_ff, kp_, kd_)
        self.period_ns = int(round(self.timing.substeps * self.timing.timestep * 1e9))
        self._timeout_ns = int(round(command_timeout_s * 1e9))
        self._noise = noise
        self._rng = np.random.default_rng(seed)
        q_init = (np.clip(model.qpos0, *np.asarray(joint_range).T) if initial_positions is None
                  else np.asarray(initial_positions, dtype=float))
        self._data = mujoco.MjData(self._model)
        self._data.qpos[self._link_qpos] = q_init
        if elastic is not None:  # the rotors in line with the links: the arm sags onto its springs
            self._data.qpos[elastic.rotor_qpos] = q_init
        mujoco.mj_forward(self._model, self._data)
        self.periods = 0
        # the command in force: a held target per joint, and when it was given (-1: never)
        self._q_des, self._dq_des, self._tau_ff = q_init.copy(), np.zeros(n), np.zeros(n)
        self._commanded_at = np.full(n, -1, dtype=np.int64)
        self._preview: Preview | None = None
        self._preview_start_ns = 0
        self.stale = np.zeros(n, dtype=bool)  # joints on damping only at the last period
        self.error: str | None = None  # set when MuJoCo diverged: nothing more is simulated

    @property
    def n_joints(self) -> int:
        return self._link_dof.shape[0]

    @property
    def sim_time(self) -> float:
        """Simulated seconds so far."""
        return self.periods * self.period_ns * 1e-9

    @property
    def next_stamp_ns(self) -> int:
        """Stamp of the next sample ``advance`` reports."""
        return (self.periods + 1) * self.period_ns

    def command(self, joints: np.ndarray, q_des, dq_des, tau_ff) -> None:
        """A streamed command for the joints ``joints`` (k,) indices: q_des rad (NaN: no position
        target), dq_des rad/s, tau_ff N m, (k,) each, in force from the next period; it ends a
        preview. ValueError for an infinite q_des or a non-finite dq_des or tau_ff."""
        q_des, dq_des, tau_ff = (np.asarray(a, dtype=float) for a in (q_des, dq_des, tau_ff))
        if np.any(np.isinf(q_des)) or not (np.all(np.isfinite(dq_des)) and np.all(np.isfinite(tau_ff))):
            raise ValueError("a command's position must be finite or NaN (no target), its velocity and effort finite")
        if self._preview is not None:
            self._hold_preview_at(self.next_stamp_ns - self.period_ns)
        self._q_des[joints], self._dq_des[joints], self._tau_ff[joints] = q_des, dq_des, tau_ff
        self._commanded_at[joints] = self.periods * self.period_ns

    def follow(self, preview: Preview, start_ns: int) -> None:
        """Sample ``preview`` (every joint, in model order) at each period from ``start_ns`` (its
        time 0 on the simulated clock); it replaces the command in force."""
        if preview.q.shape[1] != self.n_joints:
            raise ValueError(f"a preview of {preview.q.shape[1]} joints for an arm of {self.n_joints}")
        if self._preview is not None:
            self._hold_preview_at(self.next_stamp_ns - self.period_ns)
        self._preview, self._preview_start_ns = preview, int(start_ns)

    @property
    def preview_end_ns(self) -> int | None:
        """Simulated time (ns) of the last knot of the preview in force, None without one."""
        if self._preview is None:
            return None
        return self._preview_start_ns + int(round(self._preview.end * 1e9))

    def _hold_preview_at(self, now_ns: int) -> None:
        """Leave the preview: its sample at ``now_ns`` becomes the held command of every joint."""
        q, dq, effort = self._preview.sample(np.array([(now_ns - self._preview_start_ns) * 1e-9]))
        self._q_des[:], self._dq_des[:], self._tau_ff[:] = q[0], dq[0], effort[0]
        self._commanded_at[:] = min(now_ns, self.preview_end_ns)
        self._preview = None

    def _targets(self, stamps: np.ndarray):
        """(q_des, dq_des, tau_ff, commanded_at), (m, n) each, at the periods stamped ``stamps`` (m,)."""
        m = stamps.shape[0]
        q_des, dq_des, tau_ff = (np.broadcast_to(a, (m, self.n_joints)).copy()
                                 for a in (self._q_des, self._dq_des, self._tau_ff))
        commanded_at = np.broadcast_to(self._commanded_at, (m, self.n_joints)).copy()
        if self._preview is not None:
            started = stamps >= self._preview_start_ns
            if started.any():
                q, dq, effort = self._preview.sample((stamps[started] - self._preview_start_ns) * 1e-9)
                q_des[started], dq_des[started], tau_ff[started] = q, dq, effort
                commanded_at[started] = np.minimum(stamps[started], self.preview_end_ns)[:, None]
        return q_des, dq_des, tau_ff, commanded_at

    def advance(self, count: int) -> StateBlock:
        """Simulate up to ``count`` periods; the samples reported at their starts. Fewer when MuJoCo
        diverges: ``error`` then says so, the block ends with the state the failed period started
        from, and later calls simulate nothing."""
        if self.error is not None or count < 1:
            empty = np.empty((0, self.n_joints))
            return StateBlock(np.empty(0, dtype=np.int64), empty, empty.copy(), empty.copy(),
                              None if self.elastic is None else empty.copy())
        stamps = self.next_stamp_ns + self.period_ns * np.arange(count, dtype=np.int64)
        q_des, dq_des, tau_ff, commanded_at = self._targets(stamps)
        stale = (commanded_at >= 0) & (stamps[:, None] - commanded_at > self._timeout_ns)
        any_stale = stale.any(axis=1)
        free = np.isnan(q_des)
        any_free = free.any(axis=1)
        q_out, dq_out, tau_out = (np.empty((count, self.n_joints)) for _ in range(3))
        motor_out = None if self.elastic is None else np.empty((count, self.n_joints))
        done = 0
        with mujoco_warnings() as messages:
            for k in range(count):
                if motor_out is None:
                    failure = self._period(k, q_out, dq_out, tau_out, q_des, dq_des, tau_ff, stale, any_stale, free,
                                           any_free)
                else:
                    failure = self._elastic_period(k, q_out, dq_out, tau_out, motor_out, q_des, dq_des, tau_ff,
                                                   stale, any_stale, free, any_free)
                done = k + 1
                if failure is not None:
                    self.error = f"{failure} (MuJoCo: {' '.join(messages) or 'bad state'})"
                    break
                self.periods += 1
        self.stale = stale[done - 1]
        if self._preview is not None and stamps[done - 1] >= self.preview_end_ns:
            self._hold_preview_at(int(stamps[done - 1]))
        noise, rng = self._noise, self._rng
        return StateBlock(stamps[:done], measure(q_out[:done], noise.q_std, noise.q_resolution, rng),
                          measure(dq_out[:done], noise.dq_std, noise.dq_resolution, rng),
                          measure(tau_out[:done], noise.tau_std, noise.tau_resolution, rng),
                          None if motor_out is None else measure(motor_out[:done], noise.q_std, noise.q_resolution,
                                                                 rng))

    def _period(self, k, q_out, dq_out, tau_out, q_des, dq_des, tau_ff, stale, any_stale, free,
                any_free) -> str | None:
        """Period ``k`` of a rigid arm: its sample into row k of the outputs, the law's torque held
        over the period's MuJoCo steps. Returns what went wrong, or None."""
        qpos, qvel = self._data.qpos, self._data.qvel
        q_out[k], dq_out[k] = qpos, qvel
        if any_stale[k]:  # damping only: no position error, no velocity target, no feed-forward
            s = stale[k]
            q_des[k, s], dq_des[k, s], tau_ff[k, s] = qpos[s], 0.0, 0.0
        if any_free[k]:  # no position target: no position error
            f = free[k]
            q_des[k, f] = qpos[f]
        tau_out[k] = self._control(q_out[k], dq_out[k], q_des[k], dq_des[k], tau_ff[k])
        try:
            step(self._model, self._data, tau_out[k], self.timing.substeps)
        except DataError as exc:
            return str(exc)
        return None

    def _elastic_period(self, k, q_out, dq_out, tau_out, motor_out, q_des, dq_des, tau_ff, stale,
                        any_stale, free, any_free) -> str | None:
        """Period ``k`` of an elastic arm: the link side's and the motor side's sample into row k
        of the outputs, the MIT law on the rotor evaluated at every MuJoCo step. Returns what went
        wrong, or None."""
        plant, data = self.elastic, self._data
        qpos, qvel, applied = data.qpos, data.qvel, data.qfrc_applied
        q_out[k], dq_out[k], motor_out[k] = qpos[plant.link_qpos], qvel[plant.link_dof], qpos[plant.rotor_qpos]
        if any_stale[k]:  # damping only, on the motor side
            s = stale[k]
            q_des[k, s], dq_des[k, s], tau_ff[k, s] = motor_out[k, s], 0.0, 0.0
        free_k = free[k] if any_free[k] else None   # no position target: the rotor's position at every step
        if free_k is not None:
            q_des[k, free_k] = motor_out[k, free_k]
        counts = data.warning.number
        for sub in range(self.timing.substeps):
            rotor = qpos[plant.rotor_qpos]
            target = q_des[k] if free_k is None else np.where(free_k, rotor, q_des[k])
            drive = mit_torque(rotor, qvel[plant.rotor_dof], target, dq_des[k], tau_ff[k], self.kp, self.kd)
            if sub == 0:
                tau_out[k] = drive
            if self._gearbox is not None:
                theta, dtheta = qpos[plant.rotor_qpos], qvel[plant.rotor_dof]
                link = plant.transmission.torque(theta - qpos[plant.link_qpos], dtheta - qvel[plant.link_dof])
                drive = drive + self._gearbox.torque(theta, dtheta, link)
            applied[plant.rotor_dof] = drive
            mujoco.mj_step(self._model, data)
        if _counted_divergence(counts) or not np.all(np.isfinite(qpos)):
            return (f"the elastic arm diverged within {self.timing.substeps} step(s) after t={data.time:.4f} s: "
                    "the transmission is too stiff for the timestep, or the gains too high")
        return None
