"""A bootstrap's refits at once (docs/ladder-fits.md#precision): `fit`'s extended-precision polish run from the
fit to the means for every draw together, one array operation per step; a draw whose steps do not settle is
fitted alone by `fit`."""

import numpy as np
import pandas as pd

from mbexp.analysis.ladder.powerlaw import (
    ALPHA_BOUNDS,
    AT_BOUND,
    NOISE_FLOOR,
    SSE_ROUNDING,
    ZERO_FLOOR,
    Curve,
    _curves,
    _model_parts,
    _sse,
    axes,
    fit,
)

ROW_STEPS = 600  # the steps from the fit to the means (a few draws would travel the valley between E and A)


def refits(points: pd.DataFrame, losses: np.ndarray, start: np.ndarray, *, zero_floor: bool = False
           ) -> list[tuple[dict[str, Curve], np.ndarray] | None]:
    """The refit of each row of `losses` (a bootstrap's draws) from `start`, as `fit(points.assign(loss=row),
    start)` refits it; None where that raises. The polish runs from `start` for every row at once; a row whose
    steps do not settle is fitted alone by `fit`; a flat form's row can settle at another of its optima than
    `fit`'s (docs/ladder-fits.md#precision)."""
    names, which, x, centre = axes(points)
    found = _newton_rows(start, x, np.asarray(losses, float), which, len(names), zero_floor)
    out = []
    for row, p in zip(losses, found):
        if p is not None:
            out.append((_curves(names, p, centre), p))
            continue
        try:
            out.append(fit(points.assign(loss=row), start, zero_floor=zero_floor))
        except RuntimeError:
            out.append(None)
    return out


def refit_curves(points: pd.DataFrame, losses: np.ndarray, start, *, zero_floor: bool = False
                 ) -> list[dict[str, Curve] | None]:
    """`refits`' curves alone (None where a refit fails): what a bootstrap reads."""
    return [None if got is None else got[0] for got in refits(points, losses, start, zero_floor=zero_floor)]


def _newton_rows(start: np.ndarray, x, ys: np.ndarray, which, k: int, zero_floor: bool) -> list:
    """`powerlaw._polish` from `start` for each row of `ys` at once: damped Newton steps in extended precision,
    a parameter that reaches a bound held there until the gradient pulls it inside; a step that fits worse is
    damped (the rows start further from their optimum than a polish does). None in a row that does not settle."""
    rows, size = len(ys), len(start)
    low = np.array([0.0] + [-np.inf] * k + [ALPHA_BOUNDS[0]] * k, dtype=np.longdouble)
    high = np.repeat(np.array([np.inf] * (1 + k) + [ALPHA_BOUNDS[1]] * k, dtype=np.longdouble)[None, :], rows, 0)
    high[:, 0] = ZERO_FLOOR if zero_floor else ys.min(axis=1) * (1 - 1e-9)  # E below each row's least loss
    p = np.clip(np.repeat(np.asarray(start, dtype=np.longdouble)[None, :], rows, 0), low, high)
    fixed = np.zeros((rows, size), bool)
    for bound in (np.broadcast_to(low, high.shape), high):
        near = np.isfinite(bound) & (np.abs(p - bound) <= AT_BOUND * np.maximum(1, np.abs(bound)))
        p[near], fixed[near] = bound[near], True
    x, y = x.astype(np.longdouble), ys.astype(np.longdouble)
    sse = _sse(p, x, y, which, k)
    damping, last = np.zeros(rows, np.longdouble), np.full(rows, np.inf)
    live, result, eye = ys.min(axis=1) > 0, [None] * rows, np.eye(size, dtype=bool)  # `fit` refuses the rest
    with np.errstate(over="ignore", invalid="ignore"):
        for _ in range(ROW_STEPS):
            at = np.flatnonzero(live)
            if not len(at):
                break
            grad, hess = _derivatives_rows(p[at], x, y[at], which, k)
            held = fixed[at]
            cut = held[:, :, None] | held[:, None, :]  # a held parameter's row and column: the identity
            scale = np.max(np.where(held, 0, np.abs(np.diagonal(hess, axis1=1, axis2=2))), axis=1)
            a = np.where(cut, eye, hess + (damping[at] * scale)[:, None, None] * eye)
            step = _cholesky_rows(a, np.where(held, 0, grad))
            ahead = p[at] - step
            new = np.clip(ahead, low, high[at])
            out = ~held & ((ahead < low) | (ahead > high[at]))
            fits = _sse(new, x, y[at], which, k)
            taken = np.isfinite(step).all(axis=1) & (fits <= sse[at] * (1 + SSE_ROUNDING))
            undamped = damping[at] == 0
            change = np.max(np.abs(step) / np.maximum(1, np.abs(new)), axis=1)
            change[~undamped | out.any(axis=1)] = np.inf
            settled = taken & ((change <= 1e-16) | ((change <= NOISE_FLOOR) & (change > last[at] / 2)))
            moved = at[taken]
            p[moved], sse[moved], fixed[moved] = new[taken], fits[taken], held[taken] | out[taken]
            last[moved] = change[taken]
            damping[moved] = np.where(damping[moved] > 1e-12, damping[moved] / 10, 0)
            refused = at[~taken]
            damping[refused] = np.maximum(damping[refused] * 10, 1e-12)
            live[refused[damping[refused] > 1e6]] = False  # no way down
            bound_low, bound_high = p[at] == low, p[at] == high[at]
            pulled = held & ((bound_low & (grad < 0)) | (bound_high & (grad > 0)))  # pulled inside: free it
            for j in np.flatnonzero(settled):
                i = at[j]
                if pulled[j].any():
                    fixed[i] &= ~pulled[j]
                    last[i] = np.inf
                else:
                    result[i], live[i] = p[i].astype(float), False
    return result


def _derivatives_rows(p, x, y, which, k) -> tuple[np.ndarray, np.ndarray]:
    """`_derivatives` for each row of `p` and `y` (the gradient and Hessian of ½·SSE), summed per curve: the
    Jacobian of curve w's points is zero outside E, log A_w and α_w."""
    m, g = _model_parts(p, x, which, k)
    r = y - m
    hess = np.zeros((len(p), p.shape[1], p.shape[1]), dtype=p.dtype)
    grad = np.zeros_like(p)
    hess[:, 0, 0], grad[:, 0] = len(x), -np.sum(r, axis=1)
    for w in range(k):
        a, b, mine = 1 + w, 1 + k + w, which == w
        gw, xw, rw = g[:, mine], x[mine], r[:, mine]
        gg, rg = gw * gw, rw * gw
        hess[:, 0, a] = hess[:, a, 0] = np.sum(gw, axis=1)
        hess[:, 0, b] = hess[:, b, 0] = -np.sum(xw * gw, axis=1)
        hess[:, a, a] = np.sum(gg - rg, axis=1)
        hess[:, a, b] = hess[:, b, a] = np.sum(xw * (rg - gg), axis=1)
        hess[:, b, b] = np.sum(xw * xw * (gg - rg), axis=1)
        grad[:, a], grad[:, b] = -np.sum(rg, axis=1), np.sum(xw * rg, axis=1)
    return grad, hess


def _cholesky_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a⁻¹ b for each row's matrix, by the Cholesky factorisation written out over the rows at once (no LAPACK),
    a column at a time; NaN in a row whose matrix is not positive definite."""
    n = b.shape[1]
    low = np.zeros_like(a)
    with np.errstate(invalid="ignore", divide="ignore"):
        for j in range(n):
            s = a[:, j:, j] - np.einsum("rik,rk->ri", low[:, j:, :j], low[:, j, :j])
            low[:, j, j] = np.sqrt(np.where(s[:, 0] > 0, s[:, 0], np.nan))
            low[:, j + 1:, j] = s[:, 1:] / low[:, j, j][:, None]
        z = np.zeros_like(b)
        for i in range(n):
            z[:, i] = (b[:, i] - np.einsum("rk,rk->r", low[:, i, :i], z[:, :i])) / low[:, i, i]
        out = np.zeros_like(b)
        for i in reversed(range(n)):
            out[:, i] = (z[:, i] - np.einsum("rk,rk->r", low[:, i + 1:, i], out[:, i + 1:])) / low[:, i, i]
    return out
