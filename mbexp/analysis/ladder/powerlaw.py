"""The saturating power law L(C) = E + A·C^-α of a ladder (docs/ladder-fits.md#the-fit): the curve, the compute
multiplier and crossover between two curves, and the joint least-squares fit on a shared floor E, finished in
extended precision so that every CPU writes the same bytes."""

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

ALPHA_BOUNDS = (1e-6, 2.0)  # α in (0, 2]
E_STARTS = (0.0, 0.5, 0.9)  # the fit starts with E at these fractions of the least loss and keeps the best
ZERO_FLOOR = 1e-12  # E's upper bound for the E = 0 form: the polish then holds E at 0
AT_BOUND = 1e-7  # a fitted parameter this close to a bound (relative to max(1, |bound|)) is set to the bound
MAX_EVALUATIONS = 2000  # the trust region's budget of residual evaluations per start
EARLY_EVALUATIONS = 30  # a bootstrap refit's short trust-region run before the polish (docs/ladder-fits.md#precision)


@dataclass(frozen=True)
class Curve:
    """L(C) = E + A·C^-α, with A kept as log A (C^α overflows nothing in log space)."""

    E: float
    log_A: float
    alpha: float

    @property
    def A(self) -> float:
        return math.exp(self.log_A)

    def loss(self, compute):
        return self.E + np.exp(self.log_A - self.alpha * np.log(compute))

    def compute(self, loss: float) -> float:
        """The compute at which the curve reaches `loss`; inf when `loss` is at or below the floor E."""
        if loss <= self.E:
            return math.inf
        log_c = (self.log_A - math.log(loss - self.E)) / self.alpha
        return math.exp(log_c) if log_c < 700 else math.inf  # e^700 is finite; a flat curve needs "infinite" C


def multiplier(base: Curve, curve: Curve, compute: float) -> float:
    """m = C_base(L(C)) / C: how many times C the baseline needs to reach the loss `curve` has at C (> 1: the
    variant is ahead); inf when that loss is at or below the baseline's floor."""
    return base.compute(float(curve.loss(compute))) / compute


def crossover(base: Curve, curve: Curve, low: float, high: float) -> tuple[float, str]:
    """Where two curves on one floor E cross, solved in closed form (A_v·C^-α_v = A_b·C^-α_b):
    (C, "within") inside [low, high], (C, "beyond") above high, (nan, "none") when they do not cross at C ≥ low."""
    if curve.alpha == base.alpha:
        return math.nan, "none"
    log_c = (curve.log_A - base.log_A) / (curve.alpha - base.alpha)
    if log_c < math.log(low):
        return math.nan, "none"
    return math.exp(min(log_c, 700.0)), "within" if log_c <= math.log(high) else "beyond"  # 700: e^700 is finite


def fit(points: pd.DataFrame, start: np.ndarray | None = None, *, zero_floor: bool = False
        ) -> tuple[dict[str, Curve], np.ndarray]:
    """One curve per variant on a shared floor E, least squares on the points' mean losses (columns variant,
    compute, loss); bounded α in (0, 2], E in [0, least loss) (E = 0 with `zero_floor`). Fitted in
    x = log C − mean(log C) so the amplitudes stay O(1). Returns the curves and the parameter vector (a start for
    the bootstrap's refits)."""
    names, which, x, centre = axes(points)
    y, k = points["loss"].to_numpy(float), len(names)
    if not y.min() > 0:  # a bootstrap draw of a 2-seed point (t on 1 df) can reach it: that refit is dropped
        raise RuntimeError("a mean loss at or below 0: no power law with E ≥ 0 fits it")

    rows = np.arange(len(y))

    def residual(p):
        return _model_parts(p, x, which, k)[0] - y

    def jacobian(p):  # ∂model/∂(E, log A_1..k, α_1..k), in closed form: no finite differences
        g = _model_parts(p, x, which, k)[1]
        out = np.zeros((len(y), len(p)))
        out[:, 0], out[rows, 1 + which], out[rows, 1 + k + which] = 1.0, g, -x * g
        return out

    low = [0.0] + [-np.inf] * k + [ALPHA_BOUNDS[0]] * k
    high = [ZERO_FLOOR if zero_floor else y.min() * (1 - 1e-9)] + [np.inf] * k + [ALPHA_BOUNDS[1]] * k
    bounds = (np.asarray(low), np.asarray(high))

    def solve(starts: list, box: tuple, evaluations: int = MAX_EVALUATIONS) -> np.ndarray | None:
        best, best_sse = None, math.inf
        for p0 in starts:
            got = least_squares(residual, np.clip(p0, box[0], np.nextafter(box[1], 0)), jac=jacobian, bounds=box,
                                method="trf", max_nfev=evaluations)
            if not got.success and (got.status != 0 or evaluations == MAX_EVALUATIONS):  # no convergence
                continue
            params = got.x
            sse = float(np.sum(residual(params) ** 2))
            if sse < best_sse:
                best, best_sse = params, sse
        return best

    if start is not None and start[0] <= 0 and not zero_floor:
        # a refit from an optimum with E at its bound 0: the trust region creeps towards a bound, so E is held
        # at 0 first; where the gradient pulls a held bound inside, the fit in the whole box below takes over
        held = solve([start], (low, [ZERO_FLOOR] + high[1:]))
        polished = None if held is None else _polish(held, x, y, which, k, bounds, release=False)
        if polished is not None:
            return _curves(names, polished, centre), polished
    if start is not None:
        # a refit from a nearby optimum (the bootstrap's): a short trust-region run, then Newton's steps, reach it
        # where the full run crawls along a bound; where the steps stall or fit worse, the full run below decides
        early = solve([start], (low, high), EARLY_EVALUATIONS)
        polished = None if early is None else _polish(early, x, y, which, k, bounds)
        if polished is not None and _sse(polished, x, y, which, k) <= _sse(early, x, y, which, k):
            return _curves(names, polished, centre), polished
    fractions = (0.0,) if zero_floor else E_STARTS
    best = solve([start] if start is not None else [_start(x, y, which, k, f * y.min()) for f in fractions],
                 (low, high))
    if best is None:
        raise RuntimeError("the power-law fit did not converge")
    polished = _polish(best, x, y, which, k, bounds)
    best = best if polished is None else polished  # a stalled polish keeps the trust-region answer
    return _curves(names, best, centre), best


def axes(points: pd.DataFrame) -> tuple[list, np.ndarray, np.ndarray, float]:
    """The fit's coordinates of `points`: the variants in order of appearance, each point's variant index, its
    x = log C − mean(log C), and that mean."""
    names = list(dict.fromkeys(points["variant"]))
    which = points["variant"].map(names.index).to_numpy()
    log_c = np.log(points["compute"].to_numpy(float).astype(np.longdouble))  # libm's log: no CPU-dependent SIMD
    centre = float(log_c.mean())
    return names, which, (log_c - centre).astype(float), centre


def _curves(names: list, p: np.ndarray, centre: float) -> dict[str, Curve]:
    k = len(names)
    e, a, alpha = p[0], p[1:k + 1], p[k + 1:]
    return {n: Curve(float(e), float(a[i] + alpha[i] * centre), float(alpha[i])) for i, n in enumerate(names)}


def _polish(params: np.ndarray, x, y, which, k: int, bounds: tuple, release: bool = True) -> np.ndarray | None:
    """The trust-region answer refined by Newton steps in extended precision, a parameter at a bound held there: the
    optimum then depends neither on the BLAS's rounding nor on the solver's stopping point
    (docs/ladder-fits.md#precision); None where the steps stall, or (`release` False) where the gradient pulls a held
    parameter inside."""
    low, high = (np.asarray(b, dtype=np.longdouble) for b in bounds)
    p, x, y = params.astype(np.longdouble), x.astype(np.longdouble), y.astype(np.longdouble)
    fixed = np.zeros(len(p), bool)
    for bound in (low, high):
        near = np.isfinite(bound) & (np.abs(p - bound) <= AT_BOUND * np.maximum(1, np.abs(bound)))
        p[near], fixed[near] = bound[near], True
    damping = 0.0  # Levenberg–Marquardt's, where the Hessian is not positive definite or a step fits worse
    last = np.inf  # the previous undamped step's largest relative size
    with np.errstate(over="ignore", invalid="ignore"):  # a step far off overflows: the check below ends it
        for _ in range(POLISH_STEPS):
            grad, hess = _derivatives(p, x, y, which, k)
            if not (np.isfinite(grad).all() and np.isfinite(hess).all()):  # overflowed: far from any optimum
                return None
            free = np.ix_(~fixed, ~fixed)
            scale = np.abs(np.diag(hess[free])).max()
            step = np.zeros_like(p)
            solved = _cholesky_solve(hess[free] + damping * scale * np.eye(len(free[0])), grad[~fixed])
            if solved is None or damping > 1e6:
                if damping > 1e6:  # no way down
                    return None
                damping = max(damping * 10, 1e-12)
                continue
            step[~fixed] = solved
            new = np.clip(p - step, low, high)
            if damping and _sse(new, x, y, which, k) > _sse(p, x, y, which, k) * (1 + SSE_ROUNDING):
                damping *= 10
                continue
            out = ~fixed & ((p - step < low) | (p - step > high))
            p, fixed, damped = new, fixed | out, damping
            damping = damping / 10 if damping > 1e-12 else 0.0
            size = np.inf if damped or out.any() else float(np.max(np.abs(step) / np.maximum(1, np.abs(p))))
            if size <= 1e-16 or NOISE_FLOOR >= size > last / 2:  # converged, or down to the solve's rounding
                pulled = fixed & (((p == low) & (grad < 0)) | ((p == high) & (grad > 0)))  # pulled inside: free it
                if not pulled.any():
                    return p.astype(float)
                if not release:
                    return None
                fixed, size = fixed & ~pulled, np.inf
            last = size
    return None


POLISH_STEPS = 200
NOISE_FLOOR = 1e-11  # an undamped step this small that no longer halves is rounding noise: the steps have settled
SSE_ROUNDING = 1e-15  # a damped step that fits worse by at most this fraction of the SSE is rounding: it is taken


def _model_parts(p, x, which, k):
    """The model at the points and its A·C^-α part, for one parameter vector or each row of a stack of them."""
    g = np.exp(p[..., 1 + which] - p[..., 1 + k + which] * x)
    return p[..., :1] + g, g


def _sse(p, x, y, which, k):
    return np.sum((y - _model_parts(p, x, which, k)[0]) ** 2, axis=-1)


def _derivatives(p, x, y, which, k) -> tuple[np.ndarray, np.ndarray]:
    """The gradient and Hessian of ½·SSE in the parameters (E, log A_1..k, α_1..k)."""
    m, g = _model_parts(p, x, which, k)
    r = y - m
    jac = np.zeros((len(x), len(p)), dtype=p.dtype)  # ∂m/∂p
    rows = np.arange(len(x))
    jac[:, 0] = 1
    jac[rows, 1 + which] = g
    jac[rows, 1 + k + which] = -x * g
    hess = jac.T @ jac
    rg = r * g  # minus Σ r_j ∇²m_j: the model's curvature in (log A_w, α_w)
    for w in range(k):
        a, b, mine = 1 + w, 1 + k + w, which == w
        hess[a, a] -= np.sum(rg[mine])
        hess[a, b] += np.sum(rg[mine] * x[mine])
        hess[b, b] -= np.sum(rg[mine] * x[mine] ** 2)
        hess[b, a] = hess[a, b]
    return -(jac.T @ r), hess


def _cholesky_solve(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """a⁻¹ b by a Cholesky factorisation written out (no LAPACK: its rounding varies by CPU); None unless a is
    positive definite. On Python lists of a's scalars: a few times faster than numpy on matrices this small."""
    n, zero = len(b), a.dtype.type(0)
    a, b = a.tolist(), b.tolist()  # longdouble elements stay longdouble scalars
    low = [[zero] * n for _ in range(n)]
    for i in range(n):
        row = low[i]
        for j in range(i + 1):
            other = low[j]
            s = a[i][j] - _sum([row[m] * other[m] for m in range(j)], zero)
            if i == j:
                if not s > 0:
                    return None
                row[i] = np.sqrt(s)
            else:
                row[j] = s / other[j]
    z = [zero] * n
    for i in range(n):
        z[i] = (b[i] - _sum([low[i][m] * z[m] for m in range(i)], zero)) / low[i][i]
    out = [zero] * n
    for i in reversed(range(n)):
        out[i] = (z[i] - _sum([low[m][i] * out[m] for m in range(i + 1, n)], zero)) / low[i][i]
    return np.array(out, dtype=zero.dtype)


def _sum(terms: list, zero):
    """Σ terms rounded as np.sum rounds them: one running sum below 8 terms, else 8 running sums added pairwise
    (numpy's pairwise summation up to its block of 128)."""
    if len(terms) > 128:
        return np.sum(np.array(terms, dtype=type(zero)))
    if len(terms) < 8:
        total = zero
        for t in terms:
            total = total + t
        return total
    acc, end = terms[:8], len(terms) - len(terms) % 8
    for i in range(8, end, 8):
        acc = [acc[j] + terms[i + j] for j in range(8)]
    total = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
    for t in terms[end:]:
        total = total + t
    return zero + total


def _start(x, y, which, k, e) -> np.ndarray:
    """Per variant, the line through log(L − e) against x: its intercept and minus its slope."""
    a, alpha = np.zeros(k), np.full(k, 0.3)
    for i in range(k):
        xi, zi = x[which == i], np.log(y[which == i] - e)
        if np.ptp(xi) > 0:
            slope, a[i] = np.polyfit(xi, zi, 1)
            alpha[i] = min(max(-slope, 0.01), ALPHA_BOUNDS[1] * 0.9)
        else:
            a[i] = zi.mean()
    return np.concatenate([[e], a, alpha])
