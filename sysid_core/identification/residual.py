"""Residual compensation: the joint torque a rigid-body + friction model leaves unexplained,
learnt per joint by a Gaussian mixture over (inputs, residual) and predicted by Gaussian mixture
regression (GMR), the conditional mean of the residual given the inputs.

A joint's inputs are named ``<kind>:<joint>``, in this order, all of the joint itself:

* ``q``: its position, rad;
* ``dq``: its velocity, rad/s (the direction of motion, which friction follows, is its sign);
* ``torque``: the joint torque the identified rigid-body + friction model predicts at that
  sample, N m (the model whose residual is learnt, evaluated on the same state: what a
  controller computes as its feed-forward; ``identify.predict_torque`` gives it). It carries
  the load the transmission passes, on which a gearbox's friction grows;
* ``deflection``: when the arm records a motor-side encoder, q minus the motor-side position
  (gear ratio applied), rad.

The mixture is fitted by scikit-learn's ``GaussianMixture`` (full covariances, EM) on inputs and
residual normalised to zero mean and unit scale, on at most MAX_FIT_SAMPLES evenly spread
samples per fit (its cost stays flat however long the recording). The number of components is
chosen by blocked cross-validation on the training recording alone, never on a validation
recording: the recording is cut into FOLDS contiguous stretches, each held out whole in turn (a
stretch of motion the fit has not seen, as a new recording is; samples interleaved with the
fitted ones would share their motion and flatter the model). A number of components qualifies
when its mixture lowers the held-out residual's RMS by at least MIN_GAIN on every stretch; of
those, the one with the lowest pooled held-out RMS is refitted on every sample. A joint where
none qualifies keeps no model (its prediction is zero) and its ``reason`` says why: a gain seen on
some stretches only is one the motion happened to give, which a new recording will not repeat
(on a short recording a mixture fitted to a few seconds finds such gains, and applied it makes
validation worse). The stretches share one excitation, though: a dependence on the other joints'
motion that a different excitation changes is invisible to them, which only a separate
validation recording shows.

The fitted model is plain numbers (``ResidualModel.as_dict``, written as residual_model.json):
per joint the input names, the normalisation (mean, scale of inputs and residual), and per
component its weight, mean and full covariance in normalised units. The conditional mean needs
nothing but NumPy::

    z = (x - mean[:d]) / scale[:d]                          x: (N, d) inputs, d = len(inputs)
    for component k (weight w_k, mean m_k, covariance S_k, blocks xx = [:d, :d], yx = [d, :d]):
        h_k(z) = w_k N(z; m_k[:d], S_k[xx])
        y_k(z) = m_k[d] + S_k[yx] S_k[xx]^-1 (z - m_k[:d])
    and a background: h_0 = exp(background), y_0 = -mean[d] / scale[d] (a residual of zero)
    residual (N m) = mean[d] + scale[d] * (h_0 y_0 + sum_k h_k y_k) / (h_0 + sum_k h_k)

The background is what keeps the model from extrapolating: Gaussian mixture regression is
linear far from its components, and an arm that moves where the training data never went (a
new pose, a faster speed, a heavier load) would get a correction of any size. ``background`` is
the log of the input density below which a correction fades to zero: a tenth of the density at
the least covered BACKGROUND_QUANTILE of the training inputs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import DataError
from .identify import fitted_torque

# candidate numbers of components, each cross-validated
COMPONENTS = (1, 2, 4, 8, 12, 16)
# contiguous stretches of the training recording, each held out in turn
FOLDS = 4
MIN_HELDOUT = 200  # samples per stretch
# a mixture qualifies only if it lowers the held-out residual's RMS by at least this fraction
# on every stretch
MIN_GAIN = 0.02
BACKGROUND_QUANTILE = 0.01
BACKGROUND_FACTOR = 0.1
# the candidates are tried in increasing order until this many in a row do no better (pooled
# held-out RMS) than the best so far: a mixture that larger ones keep failing to improve on
# leaves them nothing to find, and on noise they are the slowest to fit
PATIENCE = 3
# samples EM sees at most per fit (an even subsample): the mixture's cost stays flat in the data
MAX_FIT_SAMPLES = 20_000
# covariance regularisation in normalised units: a component may not collapse onto a line
REG_COVAR = 1e-4
INPUT_KINDS = ("q", "dq", "torque", "deflection")
# what each input kind is, for the file (see the module docstring)
INPUT_MEANING = {"q": "joint position, rad", "dq": "joint velocity, rad/s",
                 "torque": "the joint torque the identified rigid-body + friction model predicts at the sample, N m",
                 "deflection": "joint position minus motor-side position (gear ratio applied), rad"}


@dataclass(frozen=True, eq=False)
class JointResidual:
    """One joint's mixture. ``inputs`` (d,) names such as ``q:joint2``; ``mean``, ``scale``
    (d + 1,) the normalisation of [inputs, residual] (residual in N m); ``weights`` (K,),
    ``means`` (K, d + 1), ``covariances`` (K, d + 1, d + 1) in normalised units. ``applied``
    False: the joint keeps no model (``reason`` says why) and predicts zero. ``heldout_rmse``
    (without, with) the chosen number of components' cross-validated residual RMS, N m, pooled
    over the held-out stretches; ``heldout_gains`` (FOLDS,) its fractional RMS reduction on each
    stretch (empty when unknown)."""

    joint: str
    inputs: tuple
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    means: np.ndarray
    covariances: np.ndarray
    applied: bool = True
    reason: str = ""
    heldout_rmse: tuple = (float("nan"), float("nan"))
    background: float = -np.inf
    heldout_gains: tuple = ()

    @property
    def components(self) -> int:
        return int(np.shape(self.weights)[0])

    def predict(self, x) -> np.ndarray:
        """The residual (N,) N m at inputs ``x`` (N, d), in the order of ``inputs``."""
        x = np.atleast_2d(np.asarray(x, dtype=float))
        d = len(self.inputs)
        if x.shape[1] != d:
            raise DataError(f"{self.joint}: the residual model takes {d} inputs {list(self.inputs)}, got {x.shape[1]}")
        if not self.applied or self.components == 0:
            return np.zeros(x.shape[0])
        return self.mean[d] + self.scale[d] * conditional_mean(
            self.weights, self.means, self.covariances, (x - self.mean[:d]) / self.scale[:d],
            self.background, -self.mean[d] / self.scale[d])

    def as_dict(self) -> dict:
        return {"joint": self.joint, "inputs": list(self.inputs), "applied": self.applied, "reason": self.reason,
                "heldout_rmse": {"without": _finite(self.heldout_rmse[0]), "with": _finite(self.heldout_rmse[1])},
                "heldout_gains": [_finite(g) for g in self.heldout_gains],
                "mean": self.mean.tolist(), "scale": self.scale.tolist(), "weights": self.weights.tolist(),
                "means": self.means.tolist(), "covariances": self.covariances.tolist(),
                "background": _finite(self.background)}

    @classmethod
    def from_dict(cls, data: dict) -> "JointResidual":
        try:
            inputs = tuple(str(name) for name in data["inputs"])
            d = len(inputs)
            mean, scale = (np.asarray(data[key], dtype=float) for key in ("mean", "scale"))
            weights = np.asarray(data["weights"], dtype=float).reshape(-1)
            k = weights.shape[0]
            means = np.asarray(data["means"], dtype=float).reshape(k, d + 1)
            covariances = np.asarray(data["covariances"], dtype=float).reshape(k, d + 1, d + 1)
            held = data.get("heldout_rmse") or {}
            joint = cls(joint=str(data["joint"]), inputs=inputs, mean=mean.reshape(d + 1),
                        scale=scale.reshape(d + 1), weights=weights, means=means, covariances=covariances,
                        applied=bool(data.get("applied", True)), reason=str(data.get("reason", "")),
                        heldout_rmse=(_number(held.get("without")), _number(held.get("with"))),
                        heldout_gains=tuple(_number(g) for g in data.get("heldout_gains") or ()),
                        background=-np.inf if data.get("background") is None else float(data["background"]))
        except (KeyError, TypeError, ValueError) as err:
            raise DataError(f"not a residual model joint entry: {err}") from None
        joint.check()
        return joint

    def check(self) -> None:
        """Raises DataError unless the numbers make a usable mixture."""
        problem = None
        if any(name.split(":", 1)[0] not in INPUT_KINDS for name in self.inputs):
            problem = f"inputs must be of {INPUT_KINDS} ('q:<joint>'), got {list(self.inputs)}"
        elif not all(np.all(np.isfinite(a)) for a in (self.mean, self.scale, self.weights, self.means,
                                                       self.covariances)):
            problem = "it holds NaN or infinite numbers"
        elif np.any(self.scale <= 0):
            problem = "its scales must be positive"
        elif self.applied and (self.components == 0 or np.any(self.weights < 0)
                               or abs(float(np.sum(self.weights)) - 1.0) > 1e-6):
            problem = "its weights must be non-negative and sum to 1"
        elif self.applied and np.any(np.linalg.eigvalsh(self.covariances) <= 0):
            problem = "its covariances must be positive definite"
        if problem:
            raise DataError(f"residual model of {self.joint}: {problem}")


@dataclass(frozen=True, eq=False)
class ResidualModel:
    """Per joint of the arm (in its order) a JointResidual."""

    joints: tuple

    @property
    def joint_names(self) -> tuple:
        return tuple(j.joint for j in self.joints)

    def predict(self, q, dq, deflection=None, torque=None) -> np.ndarray:
        """The residual torque (N, n) N m at q (N, n) rad, dq (N, n) rad/s and, for models that
        take them, the deflection (N, n) rad and the identified model's predicted joint torque
        (N, n) N m, columns in ``joint_names`` order."""
        q, dq = (np.atleast_2d(np.asarray(a, dtype=float)) for a in (q, dq))
        columns = {"q": q, "dq": dq}
        for kind, given in (("deflection", deflection), ("torque", torque)):
            if given is not None:
                columns[kind] = np.atleast_2d(np.asarray(given, dtype=float))
                if columns[kind].shape != q.shape:
                    raise DataError(f"{kind} must be {q.shape} like q, got {columns[kind].shape}")
        index = {name: j for j, name in enumerate(self.joint_names)}
        out = np.zeros(q.shape)
        for j, joint in enumerate(self.joints):
            if not joint.applied or joint.components == 0:  # predicts zero, whatever its inputs
                continue
            x = []
            for name in joint.inputs:
                kind, of = name.split(":", 1)
                if kind not in columns:
                    raise DataError(f"the residual model of {joint.joint} needs the {kind} ({INPUT_MEANING[kind]}); "
                                    f"none was given")
                x.append(columns[kind][:, index[of]])
            out[:, j] = joint.predict(np.column_stack(x) if x else np.zeros((q.shape[0], 0)))
        return out

    def needs(self, kind: str) -> bool:
        """Whether an applied joint's model takes input ``kind`` (INPUT_KINDS)."""
        return any(joint.applied and any(name.split(":", 1)[0] == kind for name in joint.inputs)
                   for joint in self.joints)

    def predict_for(self, joint_names, q, dq, deflection=None, torque=None) -> np.ndarray:
        """``predict`` with the arrays (N, len(joint_names)) in the order of ``joint_names`` (the
        model's joints, in any order) and the result in that order; DataError for other joints."""
        joint_names = tuple(joint_names)
        if sorted(joint_names) != sorted(self.joint_names):
            raise DataError(f"the residual model is of the joints {list(self.joint_names)}, not {list(joint_names)}")
        columns = [joint_names.index(j) for j in self.joint_names]  # the model's column order

        def in_model_order(a):
            return None if a is None else np.atleast_2d(np.asarray(a, dtype=float))[:, columns]
        out = np.zeros(np.atleast_2d(np.asarray(q, dtype=float)).shape)
        out[:, columns] = self.predict(in_model_order(q), in_model_order(dq), in_model_order(deflection),
                                       in_model_order(torque))
        return out

    def as_dict(self) -> dict:
        return {"format": "sysid_ros residual model 2", "kind": "gmm",
                "evaluation": "per joint: GMR conditional mean of the residual torque (N m) given the inputs; "
                              "see sysid_core.identification.residual",
                "input_kinds": dict(INPUT_MEANING),
                "joints": [j.as_dict() for j in self.joints]}

    @classmethod
    def from_dict(cls, data: dict) -> "ResidualModel":
        if not isinstance(data, dict) or data.get("kind") != "gmm" or not isinstance(data.get("joints"), list):
            raise DataError("not a residual model: expected an object with kind 'gmm' and a list of joints")
        return cls(joints=tuple(JointResidual.from_dict(j) for j in data["joints"]))


def conditional_mean(weights, means, covariances, z, background: float = -np.inf, zero: float = 0.0) -> np.ndarray:
    """GMR: the mixture's conditional mean of its last dimension given the others, (N,), at
    ``z`` (N, d), all in the mixture's units: weights (K,), means (K, d + 1), covariances
    (K, d + 1, d + 1); a background of log density ``background`` predicting ``zero`` takes
    over where the mixture's own input density falls below it."""
    log_h, conditional = _components(weights, means, covariances, np.atleast_2d(z))
    log_h = np.column_stack([log_h, np.full(log_h.shape[0], background)])
    conditional = np.column_stack([conditional, np.full(conditional.shape[0], zero)])
    top = log_h.max(axis=1, keepdims=True)
    h = np.exp(log_h - top)
    return np.sum(h * conditional, axis=1) / np.sum(h, axis=1)


def input_log_density(weights, means, covariances, z) -> np.ndarray:
    """log p(z) (N,) of the mixture's inputs (its first d dimensions) at ``z`` (N, d)."""
    log_h, _ = _components(weights, means, covariances, np.atleast_2d(z))
    top = log_h.max(axis=1)
    return top + np.log(np.sum(np.exp(log_h - top[:, None]), axis=1))


def _components(weights, means, covariances, z) -> tuple:
    """Per component k: log(w_k N(z; m_k[:d], S_k[:d, :d])) and its conditional mean, each (N, K)."""
    d = z.shape[1]
    log_h = np.empty((z.shape[0], len(weights)))
    conditional = np.empty_like(log_h)
    for k, (w, m, c) in enumerate(zip(weights, means, covariances)):
        chol = np.linalg.cholesky(c[:d, :d])
        centred = z - m[:d]
        white = np.linalg.solve(chol, centred.T)  # (d, N)
        log_h[:, k] = (np.log(max(w, 1e-300)) - np.sum(np.log(np.diag(chol))) - 0.5 * d * np.log(2 * np.pi)
                       - 0.5 * np.sum(white * white, axis=0))
        gain = np.linalg.solve(c[:d, :d], c[:d, d])  # Sxx^-1 Sxy (d,)
        conditional[:, k] = m[d] + centred @ gain
    return log_h, conditional


def residual_inputs(joint_names, joint: str, deflection: bool, torque: bool = False) -> tuple:
    """The input names of ``joint``'s mixture: its q and dq, the model's predicted torque when
    given, and its deflection when recorded (in that order)."""
    if joint not in joint_names:
        raise DataError(f"no joint '{joint}' among {list(joint_names)}")
    kinds = ("q", "dq") + (("torque",) if torque else ()) + (("deflection",) if deflection else ())
    return tuple(f"{kind}:{joint}" for kind in kinds)


def fit_residual_model(joint_names, q, dq, residual, deflection=None, torque=None, seed: int = 0,
                       components=COMPONENTS) -> ResidualModel:
    """Fit one mixture per joint to the training ``residual`` (N, n) N m (measured minus the
    rigid-body + friction model) at q (N, n) rad, dq (N, n) rad/s and optionally the deflection
    (N, n) rad and the model's predicted torque (N, n) N m, rows in time order.

    Each of ``components`` (in increasing order, until PATIENCE in a row do no better) is
    cross-validated on FOLDS contiguous stretches of the rows; the number chosen is the one with
    the lowest pooled held-out RMS among those that lower it by MIN_GAIN on every stretch,
    refitted on every sample (see the module docstring). Fits at most FOLDS * len(components) + 1
    mixtures per joint, each on at most MAX_FIT_SAMPLES rows: time and memory stay flat in the
    recording's length beyond that.
    Raises DataError when there are too few samples to hold stretches out.
    """
    try:
        from sklearn.mixture import GaussianMixture
        from threadpoolctl import threadpool_limits
    except ImportError as err:  # pragma: no cover - scikit-learn is a requirement
        raise DataError(f"the GMM residual model needs scikit-learn ({err})") from None
    q, dq, residual = (np.asarray(a, dtype=float) for a in (q, dq, residual))
    n = len(joint_names)
    if not (q.shape == dq.shape == residual.shape and q.ndim == 2 and q.shape[1] == n):
        raise DataError(f"q, dq and residual must all be (N, {n}), got {q.shape}, {dq.shape}, {residual.shape}")
    optional = {}
    for name, a in (("torque", torque), ("deflection", deflection)):
        if a is not None:
            optional[name] = np.asarray(a, dtype=float)
            if optional[name].shape != q.shape:
                raise DataError(f"{name} must be {q.shape} like q, got {optional[name].shape}")
    samples = q.shape[0]
    fold = np.minimum(np.arange(samples) * FOLDS // max(samples, 1), FOLDS - 1)
    if samples // FOLDS < MIN_HELDOUT or samples - samples // FOLDS < 10 * max(components):
        raise DataError(f"{samples} samples are too few for a residual model ({FOLDS} stretches held out in turn, "
                        f"at least {MIN_HELDOUT} samples each)")
    for name, a in (("q", q), ("dq", dq), ("residual", residual), *optional.items()):
        if not np.all(np.isfinite(a)):
            raise DataError(f"{name} holds NaN or infinite values")

    def fit(data, k):
        subset = data[_even_subset(data.shape[0], MAX_FIT_SAMPLES)]
        # k-means++ seeding, not a full k-means: no OpenMP threads spinning on a busy machine
        mixture = GaussianMixture(n_components=k, covariance_type="full", reg_covar=REG_COVAR, n_init=1,
                                  init_params="k-means++", max_iter=200, random_state=seed)
        with threadpool_limits(1):  # small matrices: BLAS threads only wait for each other
            mixture.fit(subset)
        return mixture.weights_, mixture.means_, mixture.covariances_

    joints = []
    for j, joint in enumerate(joint_names):
        inputs = residual_inputs(joint_names, joint, "deflection" in optional, "torque" in optional)
        columns = [q[:, j], dq[:, j]] + [optional[kind][:, j] for kind in ("torque", "deflection") if kind in optional]
        data = np.column_stack(columns + [residual[:, j]])
        mean, scale = data.mean(axis=0), data.std(axis=0)
        scale = np.where(scale > 0, scale, 1.0)
        z = (data - mean) / scale
        d = len(inputs)
        zero = -mean[d] / scale[d]  # a residual of zero, normalised

        # per candidate: the squared errors on each held-out stretch (N m^2), then the RMS
        without = np.array([_rms(data[fold == f, d]) for f in range(FOLDS)])
        tried = []
        fitted_rows = int(np.min([np.sum(fold != f) for f in range(FOLDS)]))
        for k in sorted(components):
            if k > fitted_rows // 10:  # at least ten samples a component
                break
            if len(tried) > PATIENCE and all(t[1] >= min(u[1] for u in tried[:-PATIENCE]) for t in tried[-PATIENCE:]):
                break
            squared = np.empty(samples)
            for f in range(FOLDS):
                held = fold == f
                weights, means, covariances = fit(z[~held], k)
                floor = _background(weights, means, covariances, z[~held, :d])
                squared[held] = np.square(scale[d] * (conditional_mean(weights, means, covariances, z[held, :d],
                                                                       floor, zero) - z[held, d]))
            with_model = np.array([np.sqrt(np.mean(squared[fold == f])) for f in range(FOLDS)])
            with np.errstate(divide="ignore", invalid="ignore"):  # a stretch with no residual: NaN, no gain
                tried.append((k, float(np.sqrt(np.mean(squared))), 1.0 - with_model / without))
        pooled_without = _rms(data[:, d])
        qualified = [t for t in tried if np.all(np.nan_to_num(t[2], nan=-np.inf) >= MIN_GAIN)]
        empty = dict(weights=np.zeros(0), means=np.zeros((0, d + 1)), covariances=np.zeros((0, d + 1, d + 1)))
        if not qualified:
            k, pooled_with, gains = min(tried, key=lambda t: t[1])
            joints.append(JointResidual(
                joint=joint, inputs=inputs, mean=mean, scale=scale, applied=False,
                heldout_rmse=(pooled_without, pooled_with), heldout_gains=tuple(float(g) for g in gains),
                reason=(f"not applied: no number of components lowers the held-out residual by {100 * MIN_GAIN:g} % "
                        f"on each of the {FOLDS} stretches held out in turn (the best, {k}, changes it by "
                        + ", ".join(f"{int(round(-100 * g)):+d} %" for g in gains)
                        + f"; pooled {pooled_without:.4g} -> {pooled_with:.4g} N m): a gain the training motion "
                          f"does not repeat would not hold on a new recording"),
                **empty))
            continue
        k, pooled_with, gains = min(qualified, key=lambda t: t[1])
        weights, means, covariances = fit(z, k)
        joints.append(JointResidual(
            joint=joint, inputs=inputs, mean=mean, scale=scale, weights=weights, means=means,
            covariances=covariances, heldout_rmse=(pooled_without, pooled_with),
            heldout_gains=tuple(float(g) for g in gains),
            background=_background(weights, means, covariances, z[:, :d]),
            reason=(f"{k} components: held-out RMS {pooled_without:.4g} -> {pooled_with:.4g} N m, lower on each of "
                    f"the {FOLDS} stretches held out in turn (by " + ", ".join(f"{100 * g:.0f}" for g in gains)
                    + " %)")))
    return ResidualModel(joints=tuple(joints))


def _background(weights, means, covariances, z) -> float:
    """The background log density: BACKGROUND_FACTOR of the mixture's input density at the
    least covered BACKGROUND_QUANTILE of the inputs ``z`` (N, d) it was fitted to."""
    density = input_log_density(weights, means, covariances, z[_even_subset(z.shape[0], MAX_FIT_SAMPLES)])
    return float(np.quantile(density, BACKGROUND_QUANTILE) + np.log(BACKGROUND_FACTOR))


def _even_subset(count: int, most: int) -> np.ndarray:
    """Indices of at most ``most`` of ``count`` samples, evenly spread."""
    if count <= most:
        return np.arange(count)
    return np.linspace(0, count - 1, most).round().astype(int)


def _rms(a) -> float:
    return float(np.sqrt(np.mean(np.square(a)))) if np.size(a) else float("nan")


def _finite(x):
    return float(x) if np.isfinite(x) else None


def _number(x) -> float:
    return float("nan") if x is None else float(x)


# --------------------------------------------------------------------------- on an identification

# rows of prepared data a residual fit keeps at most (evenly spread): the mixture sees at most
# MAX_FIT_SAMPLES of them anyway, and an hour-long recording must not be held whole
MAX_RESIDUAL_ROWS = 200_000


def residual_samples(robot, result, recording) -> dict:
    """What the identified ``result`` leaves unexplained in ``recording``, at its prepared rows
    (filtered, trimmed, decimated as the identification saw them), at most MAX_RESIDUAL_ROWS
    of them: ``time`` (M,) s, and each (M, n): ``q`` rad, ``dq`` rad/s, ``torque`` the model's predicted joint torque
    N m, ``deflection`` rad (q - motor_q of the recording's motor-side encoder; None without
    one, or when it was measured at some samples only: an input must be there at every sample)
    and ``residual`` measured minus predicted torque, N m."""
    stride = max(1, int(np.ceil(recording.n_samples / MAX_RESIDUAL_ROWS)))
    parts = {"time": [], "q": [], "dq": [], "torque": [], "deflection": [], "residual": []}
    raw = recording.select(robot.joint_names)
    deflection = None
    if raw.motor_q is not None and np.isfinite(raw.motor_q).all():
        deflection = np.asarray(raw.q, dtype=float) - np.asarray(raw.motor_q, dtype=float)
    for part, predicted in fitted_torque(robot, result, recording):
        pick = slice(None, None, stride)
        parts["time"].append(np.asarray(part.time)[pick])
        parts["q"].append(part.q[pick])
        parts["dq"].append(part.dq[pick])
        parts["torque"].append(np.asarray(predicted)[pick])
        parts["residual"].append((part.tau - predicted)[pick])
        if deflection is not None:
            t = np.asarray(part.time)[pick]
            parts["deflection"].append(np.column_stack([np.interp(t, raw.time, deflection[:, j])
                                                        for j in range(deflection.shape[1])]))
    return {k: np.concatenate(v) if v else None for k, v in parts.items()}


def residual_rows(robot, result, recording) -> tuple:
    """``residual_samples`` as (q, dq, deflection or None, residual), each (M, n)."""
    rows = residual_samples(robot, result, recording)
    return rows["q"], rows["dq"], rows["deflection"], rows["residual"]


def compensate(robot, result, recording, validation=None, seed: int = 0) -> tuple:
    """Fit the residual model of ``result`` on its training ``recording`` and, with a
    ``validation`` recording, measure it there: (ResidualModel, summary) where summary is
    params.json's ``residual`` block: per joint whether it is applied and why, the components,
    the inputs, the cross-validated figures and the validation RMSE without and with it (N m)."""
    rows = residual_samples(robot, result, recording)
    model = fit_residual_model(robot.joint_names, rows["q"], rows["dq"], rows["residual"], rows["deflection"],
                               torque=rows["torque"], seed=seed)
    validated = None
    if validation is not None:
        held = residual_samples(robot, result, validation)
        if (held["deflection"] is None) != (rows["deflection"] is None):
            raise DataError("the validation recording must carry motor-side positions exactly when the training "
                            "recording does")
        corrected = held["residual"] - model.predict(held["q"], held["dq"], held["deflection"], held["torque"])
        validated = (_rms_columns(held["residual"]), _rms_columns(corrected))
    joints = []
    for j, joint in enumerate(model.joints):
        entry = {"joint": joint.joint, "applied": joint.applied, "components": joint.components,
                 "inputs": list(joint.inputs), "reason": joint.reason,
                 "heldout_rmse": {"without": _finite(joint.heldout_rmse[0]), "with": _finite(joint.heldout_rmse[1])},
                 "heldout_gains": [_finite(g) for g in joint.heldout_gains]}
        if validated is not None:
            entry["validation_rmse"] = {"without": float(validated[0][j]), "with": float(validated[1][j])}
        joints.append(entry)
    summary = {"kind": "gmm", "file": "residual_model.json", "training_rows": int(rows["q"].shape[0]),
               "deflection": rows["deflection"] is not None, "folds": FOLDS, "min_gain": MIN_GAIN,
               "joints": joints}
    return model, summary


def _rms_columns(a) -> np.ndarray:
    return np.sqrt(np.mean(np.square(a), axis=0))
