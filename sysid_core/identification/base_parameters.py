"""Base parameters: the identifiable combinations of standard parameters.

A regressor W (rows: torque samples, columns: p standard parameters) usually
has rank r < p: some parameters never affect the torques (a base link's mass)
and others only in fixed combinations (Izz of a link plus m l^2 of the next).
QR decomposition with column pivoting splits the columns into r independent
ones and p - r dependent ones, W2 = W1 K with K = R11^-1 R12, so that
W theta = W1 beta with beta = theta1 + K theta2 (Gautier 1990).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg

from ..errors import IdentificationError

ZERO_COLUMN = 1e-10  # column norm, relative to the largest, below which a column is round-off


@dataclass(frozen=True, eq=False)
class BaseParameters:
    """The base-parameter structure of a regressor with p columns, r of them independent.

    ``independent`` (r,) and ``dependent`` (p - r,) column indices; ``projection`` (r, p) maps
    standard parameters theta to base parameters beta = projection @ theta; ``names`` (r,)
    the independent columns' names; ``expressions`` (r,) readable definitions of beta.
    """

    independent: np.ndarray
    dependent: np.ndarray
    projection: np.ndarray
    names: tuple
    expressions: tuple

    @property
    def rank(self) -> int:
        return len(self.independent)


def _expression(name: str, row: np.ndarray, column_names, pivot: int, tol: float) -> str:
    terms = [name]
    for k, coeff in enumerate(row):
        if k == pivot or abs(coeff) <= tol:
            continue
        sign = "-" if coeff < 0 else "+"
        terms.append(f"{sign} {abs(coeff):.6g}*{column_names[k]}")
    return " ".join(terms)


def base_parameters(regressor: np.ndarray, column_names, tol: float | None = None) -> BaseParameters:
    """Base parameters of ``regressor`` (rows, p), columns named by ``column_names`` (p,).

    ``tol`` is the relative threshold on |R_kk| / |R_00| below which a pivot counts as
    zero (default: p * machine epsilon * 1e3, robust to round-off on well-scaled data).
    Pass a regressor built from random, well-spread states so that rank deficiencies
    are structural, not accidents of one trajectory.
    """
    regressor = np.asarray(regressor, dtype=float)
    rows, p = regressor.shape
    if len(column_names) != p:
        raise ValueError(f"{len(column_names)} names for {p} columns")
    if not np.all(np.isfinite(regressor)):
        raise IdentificationError("the regressor contains NaN or infinite values")
    # scale columns so that the rank decision does not depend on units (kg vs kg m^2); a
    # column at round-off level (a first moment along its own joint axis) is zero, not a
    # direction to be rescaled into a spurious independent parameter
    scale = np.linalg.norm(regressor, axis=0)
    nonzero = scale > ZERO_COLUMN * scale.max()
    scaled = regressor[:, nonzero] / scale[nonzero]
    _, r_mat, perm = scipy.linalg.qr(scaled, mode="economic", pivoting=True)
    diag = np.abs(np.diag(r_mat))
    tol = tol if tol is not None else max(rows, p) * np.finfo(float).eps * 1e3
    rank = int(np.sum(diag > tol * diag[0])) if diag.size and diag[0] > 0 else 0
    if rank == 0:
        raise IdentificationError("the regressor is zero: the data do not excite any parameter")
    cols = np.flatnonzero(nonzero)[perm]
    independent, dependent_nz = cols[:rank], cols[rank:]
    dependent = np.concatenate([dependent_nz, np.flatnonzero(~nonzero)]).astype(int)
    # beta = theta1 + K theta2 in unscaled units: W2 = W1 K  =>  K = S1 R11^-1 R12 S2^-1
    k_scaled = scipy.linalg.solve_triangular(r_mat[:rank, :rank], r_mat[:rank, rank:])
    k = (k_scaled / scale[independent][:, None]) * scale[dependent_nz][None, :]
    projection = np.zeros((rank, p))
    projection[np.arange(rank), independent] = 1.0
    projection[:, dependent_nz] = k
    order = np.argsort(independent)  # report base parameters in column order
    independent, projection = independent[order], projection[order]
    names = tuple(column_names[i] for i in independent)
    expressions = tuple(_expression(names[i], projection[i], column_names, independent[i], 1e-9)
                        for i in range(rank))
    return BaseParameters(independent, np.sort(dependent), projection, names, expressions)
