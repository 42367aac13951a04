"""Residual compensation: the joint torque a rigid-body + friction model leaves unexplained,
learnt per joint by a Gaussian mixture over (inputs, residual) and predicted by Gaussian mixture
regression (GMR), the conditional mean of the residual given the inputs.

A joint's inputs are its own state: position q (rad), velocity dq (rad/s) and, when the arm
records a motor-side encoder, the transmission's deflection (q - motor position, rad). The
mixture is fitted by scikit-learn's ``GaussianMixture`` (full covariances, EM) on inputs and
residual normalised to zero mean and unit scale. The number of components is chosen on the last
HOLDOUT_FRACTION of the training recording, held out whole (a stretch of motion the fit has not
seen, as a new recording is; blocks interleaved with the fitted ones would share its motion and
flatter it), never on a validation recording; a joint whose held-out residual the best mixture
does not lower by at least MIN_GAIN keeps no model (its prediction is zero) and says why.

The fitted model is plain numbers (``ResidualModel.as_dict``, written as residual_model.json):
per joint the input names, the normalisation (mean, scale of inputs and residual), and per
component its weight, mean and full covariance in normalised units. The conditional mean needs
nothing but NumPy:

    z = (x - mean[:d]) / scale[:d]                          x: (N, d) inputs, d = len(inputs)
    for component k (weight w_k, mean m_k, covariance S_k, blocks xx = [:d, :d], yx = [d, :d]):
        h_k(z) = w_k N(z; m_k[:d], S_k[xx])
        y_k(z) = m_k[d] + S_k[yx] S_k[xx]^-1 (z - m_k[:d])
    and a background: h_0 = exp(background), y_0 = -mean[d] / scale[d] (a residual of zero)
    residual (N m) = mean[d] + scale[d] * (h_0 y_0 + sum_k h_k y_k) / (h_0 + sum_k h_k)

The background is what keeps the model from extrapolating: Gaussian mixture regression is
linear far from its components, and an arm that moves where the training data never went (a
new pose, a faster speed) would get a correction of any size. ``background`` is the log of the
input density below which a correction fades to zero: a tenth of the density at the least
covered BACKGROUND_QUANTILE of the training inputs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import DataError
from .identify import fitted_torque

# candidate numbers of components, each tried on the held-out tail
COMPONENTS = (1, 2, 4, 8, 12, 16)
# the training recording's tail held out for the choice of the number of components
HOLDOUT_FRACTION = 0.25
MIN_HELDOUT = 200  # samples
# a mixture is kept only if it lowers the held-out residual's RMS by at least this fraction
MIN_GAIN = 0.02
BACKGROUND_QUANTILE = 0.01
BACKGROUND_FACTOR = 0.1
# samples EM sees at most per fit (an even subsample): the mixture's cost stays flat in the data
MAX_FIT_SAMPLES = 20_000
# covariance regularisation in normalised units: a component may not collapse onto a line
REG_COVAR = 1e-4
INPUT_KINDS = ("q", "dq", "deflection")


@dataclass(frozen=True, eq=False)
class JointResidual:
    """One joint's mixture. ``inputs`` (d,) names such as ``q:joint2``; ``mean``, ``scale``
    (d + 1,) the normalisation of [inputs, residual] (residual in N m); ``weights`` (K,),
    ``means`` (K, d + 1), ``covariances`` (K, d + 1, d + 1) in normalised units. ``applied``
    False: the joint keeps no model (``reason`` says why) and predicts zero. ``heldout_rmse``
    (without, with) the model on the held-out tail, N m."""

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

    def predict(self, q, dq, deflection=None) -> np.ndarray:
        """The residual torque (N, n) N m at q, dq (N, n) and, for models that take it, the
        deflection (N, n) rad, columns in ``joint_names`` order."""
        q, dq = (np.atleast_2d(np.asarray(a, dtype=float)) for a in (q, dq))
        columns = {"q": q, "dq": dq}
        if deflection is not None:
            columns["deflection"] = np.atleast_2d(np.asarray(deflection, dtype=float))
        index = {name: j for j, name in enumerate(self.joint_names)}
        out = np.zeros(q.shape)
        for j, joint in enumerate(self.joints):
            x = []
            for name in joint.inputs:
                kind, of = name.split(":", 1)
                if kind not in columns:
                    raise DataError(f"the residual model of {joint.joint} needs the {kind} (it was fitted with "
                                    f"a motor-side encoder); none was given")
                x.append(columns[kind][:, index[of]])
            out[:, j] = joint.predict(np.column_stack(x) if x else np.zeros((q.shape[0], 0)))
        return out

    def as_dict(self) -> dict:
        return {"format": "sysid_ros residual model 1", "kind": "gmm",
                "evaluation": "per joint: GMR conditional mean of the residual torque (N m) given the inputs; "
                              "see sysid_core.identification.residual",
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


def residual_inputs(joint_names, joint: str, deflection: bool) -> tuple:
    """The input names of ``joint``'s mixture: its q and dq, and its deflection when recorded."""
    if joint not in joint_names:
        raise DataError(f"no joint '{joint}' among {list(joint_names)}")
    return tuple(f"{kind}:{joint}" for kind in (("q", "dq", "deflection") if deflection else ("q", "dq")))


def fit_residual_model(joint_names, q, dq, residual, deflection=None, seed: int = 0,
                       components=COMPONENTS) -> ResidualModel:
    """Fit one mixture per joint to the training ``residual`` (N, n) N m (measured minus the
    rigid-body + friction model) at q, dq (N, n) and optionally the deflection (N, n) rad.

    The number of components is the one of ``components`` with the lowest residual RMS on the
    held-out tail; the kept mixture is refitted on every sample. Raises DataError when there
    are too few samples to hold a tail out.
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
    if deflection is not None:
        deflection = np.asarray(deflection, dtype=float)
        if deflection.shape != q.shape:
            raise DataError(f"deflection must be {q.shape} like q, got {deflection.shape}")
    samples = q.shape[0]
    held = np.arange(samples) >= samples - int(HOLDOUT_FRACTION * samples)
    if held.sum() < MIN_HELDOUT or (~held).sum() < 10 * max(components):
        raise DataError(f"{samples} samples are too few for a residual model (the last {HOLDOUT_FRACTION:.0%} held "
                        f"out, at least {MIN_HELDOUT} samples)")
    for name, a in (("q", q), ("dq", dq), ("residual", residual), ("deflection", deflection)):
        if a is not None and not np.all(np.isfinite(a)):
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
        inputs = residual_inputs(joint_names, joint, deflection is not None)
        columns = [q[:, j], dq[:, j]] + ([deflection[:, j]] if deflection is not None else [])
        data = np.column_stack(columns + [residual[:, j]])
        mean, scale = data.mean(axis=0), data.std(axis=0)
        scale = np.where(scale > 0, scale, 1.0)
        z = (data - mean) / scale
        d = len(inputs)
        without = _rms(data[held, d])  # without a model: the rigid model's residual as it is
        best = None
        for k in components:
            if k > (~held).sum() // 10:
                break
            weights, means, covariances = fit(z[~held], k)
            floor = _background(weights, means, covariances, z[~held, :d])
            err = _rms(scale[d] * (conditional_mean(weights, means, covariances, z[held, :d], floor,
                                                    -mean[d] / scale[d]) - z[held, d]))
            if best is None or err < best[1]:
                best = (k, err)
        k, with_model = best
        empty = dict(weights=np.zeros(0), means=np.zeros((0, d + 1)), covariances=np.zeros((0, d + 1, d + 1)))
        if not with_model < (1.0 - MIN_GAIN) * without:
            joints.append(JointResidual(
                joint=joint, inputs=inputs, mean=mean, scale=scale, applied=False, heldout_rmse=(without, with_model),
                reason=(f"not applied: on held-out data the best mixture ({k} components) leaves "
                        f"{with_model:.4g} N m RMS of {without:.4g} N m, less than {100 * MIN_GAIN:g} % better"),
                **empty))
            continue
        weights, means, covariances = fit(z, k)
        joints.append(JointResidual(joint=joint, inputs=inputs, mean=mean, scale=scale, weights=weights, means=means,
                                    covariances=covariances, heldout_rmse=(without, with_model),
                                    background=_background(weights, means, covariances, z[:, :d]),
                                    reason=f"{k} components: held-out RMS {without:.4g} -> {with_model:.4g} N m"))
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


def residual_rows(robot, result, recording) -> tuple:
    """What the identified ``result`` leaves unexplained in ``recording``, at its prepared rows
    (filtered, trimmed, decimated as the identification saw them), at most MAX_RESIDUAL_ROWS
    of them: (q, dq, deflection or None, residual), each (M, n), the deflection q - motor_q
    of the recording's motor-side encoder, the residual measured minus predicted torque, N m."""
    stride = max(1, int(np.ceil(recording.n_samples / MAX_RESIDUAL_ROWS)))
    parts = {"q": [], "dq": [], "deflection": [], "residual": []}
    raw = recording.select(robot.joint_names)
    deflection = None if raw.motor_q is None else np.asarray(raw.q, dtype=float) - np.asarray(raw.motor_q, dtype=float)
    for part, predicted in fitted_torque(robot, result, recording):
        pick = slice(None, None, stride)
        parts["q"].append(part.q[pick])
        parts["dq"].append(part.dq[pick])
        parts["residual"].append((part.tau - predicted)[pick])
        if deflection is not None:
            t = np.asarray(part.time)[pick]
            parts["deflection"].append(np.column_stack([np.interp(t, raw.time, deflection[:, j])
                                                        for j in range(deflection.shape[1])]))
    joined = {k: np.concatenate(v) if v else None for k, v in parts.items()}
    return joined["q"], joined["dq"], joined["deflection"], joined["residual"]


def compensate(robot, result, recording, validation=None, seed: int = 0) -> tuple:
    """Fit the residual model of ``result`` on its training ``recording`` and, with a
    ``validation`` recording, measure it there: (ResidualModel, summary) where summary is
    params.json's ``residual`` block: per joint whether it is applied and why, the components,
    the held-out figures and the validation RMSE without and with it (N m)."""
    q, dq, deflection, residual = residual_rows(robot, result, recording)
    model = fit_residual_model(robot.joint_names, q, dq, residual, deflection, seed=seed)
    validated = None
    if validation is not None:
        vq, vdq, vdeflection, vresidual = residual_rows(robot, result, validation)
        if (vdeflection is None) != (deflection is None):
            raise DataError("the validation recording must carry motor-side positions exactly when the training "
                            "recording does")
        validated = (_rms_columns(vresidual), _rms_columns(vresidual - model.predict(vq, vdq, vdeflection)))
    joints = []
    for j, joint in enumerate(model.joints):
        entry = {"joint": joint.joint, "applied": joint.applied, "components": joint.components,
                 "inputs": list(joint.inputs), "reason": joint.reason,
                 "heldout_rmse": {"without": _finite(joint.heldout_rmse[0]), "with": _finite(joint.heldout_rmse[1])}}
        if validated is not None:
            entry["validation_rmse"] = {"without": float(validated[0][j]), "with": float(validated[1][j])}
        joints.append(entry)
    summary = {"kind": "gmm", "file": "residual_model.json", "training_rows": int(q.shape[0]),
               "deflection": deflection is not None, "joints": joints}
    return model, summary


def _rms_columns(a) -> np.ndarray:
    return np.sqrt(np.mean(np.square(a), axis=0))
