"""Self-collision clearance of a motion, from the model's own collision geometry (MuJoCo).

MuJoCo decides which geom pairs may collide (contype/conaffinity, parent-child filtering, the
model's <exclude> and <pair> elements). Its broad and narrow phase, ``mj_collision`` on a copy of
the model whose geom and body margins are wide, name the pairs that come near, with their signed
distance ``dist`` and normal n (from the first geom to the second). Between spheres, capsules and
planes that distance is MuJoCo's exact analytic one; for other pairs (boxes, cylinders,
ellipsoids, meshes) a contact's ``dist`` within a margin is not always the distance (MuJoCo 4.0
reports capsule-cylinder contacts 2 cm off at a 6 cm margin), so those pairs are measured again
by ``mj_geomDistance``, which also gives their witness points. The distance's derivative with
respect to the joint positions is n' (J_2(p_2) - J_1(p_1)), J_k the translational Jacobian of geom
k's body at its witness point p_k.
"""
from __future__ import annotations

import copy

import mujoco
import numpy as np

# Pairs farther apart than the clearance plus this band (m) are not measured: a motion that keeps
# the clearance only needs the pairs that come near it.
DEFAULT_BAND = 0.05
# The broad phase looks this many bands beyond the clearance, so that no pair within the band is
# missed where MuJoCo's margin contacts misjudge a distance.
_BROAD_PHASE_BANDS = 2.0
# Geom types whose pairs get MuJoCo's exact analytic distance from mj_collision.
_ANALYTIC = (mujoco.mjtGeom.mjGEOM_PLANE, mujoco.mjtGeom.mjGEOM_SPHERE, mujoco.mjtGeom.mjGEOM_CAPSULE)


_NONE = (np.zeros(0), np.zeros(0, dtype=int), np.zeros(0, dtype=int), np.zeros(0, dtype=int))


class Clearance:
    """Distances between the model's collision geoms along joint positions.

    model: the arm's MjModel (hinge and slide joints; qpos = the n joint positions); clearance m
    >= 0: the smallest distance wanted between any two geoms MuJoCo would collide; band m > 0:
    pairs farther than clearance + band count as that far. ``active``: whether the model has any
    pair that may collide at all.
    """

    def __init__(self, model: mujoco.MjModel, clearance: float, band: float = DEFAULT_BAND):
        if not np.isfinite(clearance) or clearance < 0:
            raise ValueError(f"clearance must be a finite distance >= 0 m, got {clearance}")
        if not band > 0:
            raise ValueError(f"band must be > 0 m, got {band}")
        self.clearance, self.band = float(clearance), float(band)
        self.ceiling = self.clearance + self.band
        self.model = copy.copy(model)
        # the broad phase bounds each body by its compiled body_margin (the largest of its geoms')
        margin = clearance + _BROAD_PHASE_BANDS * band
        self.model.geom_margin[:] = margin
        self.model.body_margin[:] = margin
        self.model.geom_gap[:] = 0.0
        self.data = mujoco.MjData(self.model)
        self.active = bool(self.model.npair) or self._any_pair()
        analytic = np.isin(self.model.geom_type, _ANALYTIC)
        self._analytic = analytic[:, None] & analytic[None, :]                # (ngeom, ngeom)
        self._fromto = np.zeros(6)
        self._jac_a, self._jac_b = np.zeros((3, self.model.nv)), np.zeros((3, self.model.nv))

    def __getstate__(self):
        return {"model": self.model, "clearance": self.clearance, "band": self.band}

    def __setstate__(self, state):
        # the margins are already widened in the pickled copy; widening them again is harmless
        self.__init__(state["model"], state["clearance"], state["band"])

    def _any_pair(self) -> bool:
        m = self.model
        eligible = (m.geom_contype[:, None] & m.geom_conaffinity[None, :]) | \
                   (m.geom_conaffinity[:, None] & m.geom_contype[None, :])
        different = m.geom_bodyid[:, None] != m.geom_bodyid[None, :]
        return bool(np.any((eligible != 0) & different))

    def _near_pairs(self, q: np.ndarray, jacobians: bool = False):
        """The pairs within the band at joint positions q (n,): dist (k,) m, geom1, geom2 (k,),
        and the contact index (k,) for an analytic pair, -1 for one measured by mj_geomDistance.
        A pair may appear more than once (two contacts of parallel capsules), always at its distance.
        ``jacobians``: also compute what mj_jac needs at this pose."""
        m, d = self.model, self.data
        d.qpos[:] = q
        mujoco.mj_kinematics(m, d)
        if jacobians:
            mujoco.mj_comPos(m, d)
        mujoco.mj_collision(m, d)
        count = d.ncon
        if not count:
            return _NONE
        g1, g2, dist = d.contact.geom1[:count], d.contact.geom2[:count], d.contact.dist[:count]
        analytic = self._analytic[g1, g2]
        keep = np.flatnonzero(analytic & (dist < self.ceiling))
        if analytic.all():
            return dist[keep], g1[keep], g2[keep], keep
        # each other pair once (a box or cylinder pair may bring several contacts)
        pairs = sorted(set(zip(g1[~analytic].tolist(), g2[~analytic].tolist())))
        measured = [(mujoco.mj_geomDistance(m, d, a, b, self.ceiling, None), a, b) for a, b in pairs]
        measured = [t for t in measured if t[0] < self.ceiling]
        return (np.concatenate([dist[keep], [t[0] for t in measured]]),
                np.concatenate([g1[keep], [t[1] for t in measured]]).astype(int),
                np.concatenate([g2[keep], [t[2] for t in measured]]).astype(int),
                np.concatenate([keep, np.full(len(measured), -1)]).astype(int))

    def pairs(self, q: np.ndarray) -> list:
        """The pairs within the band at joint positions q (n,): [(dist m, geom1, geom2)]."""
        dist, g1, g2, _ = self._near_pairs(np.asarray(q, dtype=float))
        return [(float(a), int(b), int(c)) for a, b, c in zip(dist, g1, g2)]

    def minimum(self, q: np.ndarray) -> np.ndarray:
        """Smallest distance (N,) m at each of the joint positions q (N, n); clearance + band
        where no pair comes that close."""
        q = np.atleast_2d(np.asarray(q, dtype=float))
        return np.array([np.min(self._near_pairs(qi)[0], initial=self.ceiling) for qi in q])

    def distances(self, q: np.ndarray, gradient_below: float = -np.inf) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every pair within the band at each sample of q (G, n).

        Returns (sample (k,) int, dist (k,) m, d dist / d q (k, n) m/rad). The gradient is
        computed only for pairs closer than ``gradient_below`` m (zeros elsewhere): the costly
        part, and only the nearest pairs matter to a smooth minimum.
        """
        q = np.atleast_2d(np.asarray(q, dtype=float))
        m, d = self.model, self.data
        samples, dists, grads = [], [], []
        for i, qi in enumerate(q):
            dist, first, second, index = self._near_pairs(qi, jacobians=gradient_below > -np.inf)
            grad = np.zeros((dist.size, m.nv))
            for k in np.flatnonzero(dist < gradient_below):
                if index[k] >= 0:  # analytic: the contact's normal, witness points dist / 2 either side
                    contact = d.contact[index[k]]
                    normal = contact.frame[:3].copy()
                    p1, p2 = contact.pos - 0.5 * dist[k] * normal, contact.pos + 0.5 * dist[k] * normal
                else:
                    mujoco.mj_geomDistance(m, d, int(first[k]), int(second[k]), self.ceiling, self._fromto)
                    p1, p2 = self._fromto[:3].copy(), self._fromto[3:].copy()
                    # dividing by the signed distance keeps the normal's direction when they overlap
                    normal = (p2 - p1) / dist[k] if abs(dist[k]) > 1e-12 else np.zeros(3)
                mujoco.mj_jac(m, d, self._jac_a, None, p1, m.geom_bodyid[first[k]])
                mujoco.mj_jac(m, d, self._jac_b, None, p2, m.geom_bodyid[second[k]])
                grad[k] = normal @ (self._jac_b - self._jac_a)
            samples.append(np.full(dist.size, i))
            dists.append(dist)
            grads.append(grad)
        return np.concatenate(samples).astype(int), np.concatenate(dists), np.concatenate(grads).reshape(-1, q.shape[1])
