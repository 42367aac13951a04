"""An MIT-mode excitation on the virtual Damiao arm, deterministic, and its replay on a model.

``drive_virtual_arm`` is the host side of a Damiao arm in one loop without ROS: every command
period it sends each motor its MIT frame (``DamiaoArm.commands``: clamped, quantised by the
protocol), lets the emulated motors (``VirtualDamiaoArm`` in manual mode) run the period
step by step, and records every reply with the sim time it arrived. It returns what a
bridge and its logger would have: the recording of the replies (reported effort as tau) and
the log of the commands as the motors decode them. With the emulator's truth (effort
gains, delay, friction) it is the known-truth source of the actuator identification.

``replay_commands`` is the rollout check of an identified model: the logged commands
drive its motor actuators (ctrl = the drive's torque, gear = the effort gain) under the same
drive law, and the simulated positions are compared with the recorded ones.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass

import can
import mujoco
import numpy as np

from ..excitation.trajectory import Trajectory
from ..identification.actuator import CommandLog
from ..identification.recording import Recording
from ..simulation import diverged
from . import protocol as dm
from .arm import DamiaoArm
from .emulator import EmulatedMotor, VirtualDamiaoArm

_TIME_EPS = 1e-9


@dataclass(frozen=True, eq=False)
class MitRun:
    """``recording``: one sample per round of replies (time = their arrival, sim clock; q, dq,
    tau = position, velocity and reported torque, joint side); ``commands``: every command sent."""

    recording: Recording
    commands: CommandLog


def drive_virtual_arm(model: mujoco.MjModel, arm: DamiaoArm, plan: Trajectory, feedforward, *,
                      effort_gains=None, delay: float = 0.0, joint_friction=None,
                      frictionloss: str = "law") -> MitRun:
    """Run ``plan`` (columns in ``arm.joint_names`` order, uniform rate = the command rate) on a
    virtual arm of ``model`` with ``arm``'s motors, gains and limits, and record it.

    ``feedforward`` (N, n) N m the t_ff of every command; ``effort_gains`` (n,) the motors' true
    gains (default 1), ``delay`` s their command delay, ``joint_friction`` extra plant friction
    (see VirtualDamiaoArm), ``frictionloss`` how the plant applies the model's frictionloss
    (VirtualDamiaoArm: "law" of the velocity, or MuJoCo's "constraint"). The model's timestep
    must divide the command period. The arm
    starts at rest at plan.q[0]; motors are enabled, then commanded every period.
    RuntimeError if a motor does not enable or the physics diverges.
    """
    n = arm.n
    period = float(np.median(np.diff(plan.time)))
    dt = float(model.opt.timestep)
    steps = int(round(period / dt))
    if steps < 1 or abs(steps * dt - period) > 1e-9:
        raise ValueError(f"the model's timestep {dt} s does not divide the command period {period} s")
    gains = np.ones(n) if effort_gains is None else np.asarray(effort_gains, dtype=float)
    motors = [EmulatedMotor(arm.joint_names[j], arm.motor_types[j], arm.can_ids[j], arm.master_ids[j],
                            int(arm.directions[j]), float(arm.position_offsets[j]), arm.limits[j], float(gains[j]))
              for j in range(n)]
    channel = f"sysid_mit_run_{uuid.uuid4().hex}"
    emulator = VirtualDamiaoArm(model, motors, channel=channel, realtime=False, delay=delay,
                                joint_friction=joint_friction, frictionloss=frictionloss,
                                initial_positions=dict(zip(arm.joint_names, np.asarray(plan.q[0], dtype=float))))
    by_master = {m: j for j, m in enumerate(arm.master_ids)}
    replies = [[] for _ in range(n)]

    def collect(host):
        while (msg := host.recv(timeout=0)) is not None:
            j = by_master.get(msg.arbitration_id)
            if j is not None:
                fb = dm.measured_feedback(dm.decode_feedback(bytes(msg.data), arm.limits[j]), arm.limits[j])
                replies[j].append((emulator.sim_time, fb.status, fb.position, fb.velocity, fb.torque))

    def advance(host, count):
        for _ in range(count):
            emulator.advance(dt)
            collect(host)

    emulator.start()
    host = can.Bus(interface="virtual", channel=channel)
    try:
        for j in range(n):
            host.send(can.Message(arbitration_id=arm.can_ids[j], data=dm.enable_frame(), is_extended_id=False))
        emulator.poll()
        collect(host)
        advance(host, int(np.ceil(delay / dt)) + 1)
        silent = [arm.joint_names[j] for j in range(n) if not replies[j] or replies[j][-1][1] != dm.STATUS_ENABLED]
        if silent:
            raise RuntimeError(f"motors of {silent} did not enable")
        for r in replies:
            r.clear()
        q_des, dq_des, ff = (np.asarray(a, dtype=float) for a in (plan.q, plan.dq, feedforward))
        track = np.ones(n, dtype=bool)
        num = len(plan.time)
        log = np.empty((5, num, n))
        sent = np.empty(num)
        for k in range(num):
            cmds, _ = arm.commands(q_des[k], dq_des[k], ff[k], track)
            sent[k] = emulator.sim_time
            for j, cmd in enumerate(cmds):
                data = dm.encode_mit(cmd, arm.limits[j])
                host.send(can.Message(arbitration_id=arm.can_ids[j], data=data, is_extended_id=False))
                got = dm.decode_mit(data, arm.limits[j])     # what the motor will use
                log[:, k, j] = (got.position, got.velocity, got.torque, got.kp, got.kd)
            emulator.poll()
            collect(host)
            advance(host, steps)
        advance(host, int(np.ceil(delay / dt)) + 1)
    finally:
        host.shutdown()
        emulator.stop()

    count = min(len(r) for r in replies)
    data = np.array([r[:count] for r in replies])              # (n, count, 5)
    time = data[:, :, 0].max(axis=0)
    q, dq, tau = arm.to_joint(data[:, :, 2].T, data[:, :, 3].T, data[:, :, 4].T)
    d, off = arm.directions, arm.position_offsets
    commands = CommandLog(sent, d * log[0] + off, d * log[1], d * log[2], log[3], log[4], arm.joint_names)
    return MitRun(Recording(time, q, dq, tau, arm.joint_names), commands)


def replay_commands(model: mujoco.MjModel, commands: CommandLog, delay: float, recording: Recording) -> np.ndarray:
    """Joint positions (N, n) rad of ``model`` driven by the logged commands, at the recording's times.

    Every joint of ``commands`` needs one motor actuator in ``model`` (ctrl = the drive's torque
    in reported-effort units; its gear the effort gain, its ctrlrange the torque limit).
    Command k acts from t_k + ``delay`` (the first step that starts then or later); each step
    applies the MIT law at the mid-step state, as the virtual arm's drives do. The run starts at
    the recording's first sample (q, dq) and time. RuntimeError if the physics diverges.
    """
    names = commands.joint_names
    joint_ids = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, j) for j in names]
    if min(joint_ids) < 0:
        raise ValueError(f"joints {[j for j, i in zip(names, joint_ids) if i < 0]} are not in the model")
    actuators = []
    for j, jid in zip(names, joint_ids):
        found = [a for a in range(model.nu) if model.actuator_trntype[a] == mujoco.mjtTrn.mjTRN_JOINT
                 and model.actuator_trnid[a, 0] == jid]
        if len(found) != 1:
            raise ValueError(f"joint '{j}' needs exactly one actuator in the model, has {len(found)}")
        actuators.append(found[0])
    qadr = model.jnt_qposadr[joint_ids]
    vadr = model.jnt_dofadr[joint_ids]
    rec = recording.select(names)
    data = mujoco.MjData(model)
    data.qpos[qadr] = rec.q[0]
    data.qvel[vadr] = rec.dq[0]
    data.time = float(rec.time[0])
    mujoco.mj_forward(model, data)
    dt = float(model.opt.timestep)
    active_from = commands.time + delay
    end = float(rec.time[-1])
    times, positions = [data.time], [data.qpos[qadr].copy()]
    while data.time < end - _TIME_EPS:
        k = int(np.searchsorted(active_from, data.time + _TIME_EPS, side="right")) - 1
        if k >= 0:
            q_mid = data.qpos[qadr] + 0.5 * dt * data.qvel[vadr]
            dq_mid = data.qvel[vadr] + 0.5 * dt * data.qacc[vadr]
            data.ctrl[actuators] = commands.law(k, q_mid, dq_mid)
        else:
            data.ctrl[actuators] = 0.0
        mujoco.mj_step(model, data)
        if diverged(data):
            raise RuntimeError(f"the replay diverged at t={data.time:.4f} s")
        times.append(data.time)
        positions.append(data.qpos[qadr].copy())
    times, positions = np.array(times), np.array(positions)
    return np.column_stack([np.interp(rec.time, times, positions[:, j]) for j in range(len(names))])
