"""experiments/stats.py: the statistics every experiment reports, with no scipy.

* ``t_quantile(df)``: Student's t quantile, exactly, from its CDF;
* ``mean_ci(xs)``: a mean and the half-width of its 95 % Student-t interval
  (n - 1 degrees of freedom), mean +- t_{0.975, n-1} sd / sqrt(n);
* ``paired(a, b)``: the same for the per-seed differences of two arms that
  share seeds, with the smallest true difference the run would detect with
  80 % power, (t_{0.975, n-1} + z_{0.8}) sd / sqrt(n); ``seeds_needed`` inverts it;
* ``contrast``: a primary or secondary contrast (paired, with the predicted
  sign); ``verdict``: agree / contradict / inconclusive against a margin fixed
  before the run; ``print_contrasts``, ``ci`` and ``fmt`` for tables;
* ``p_value(c)``: the two-sided paired-t p of a contrast, 2 (1 - F_{n-1}(|t|)),
  t = diff / (sd / sqrt(n)); ``holm(ps)``: Holm's step-down adjustment of a
  family of p-values, p_(k) -> max_{j <= k} min(1, (m - j + 1) p_(j)), which
  keeps the family-wise error at 5 % when the adjusted p is read against 0.05;
* ``pearson(xs, ys)``: the sample correlation, sum (x - xbar)(y - ybar) /
  sqrt(sum (x - xbar)^2 sum (y - ybar)^2).
"""

import functools
import math


def t_cdf(t, df):
    """CDF of Student's t with df degrees of freedom, exactly, from the
    regularised incomplete beta (Lentz's continued fraction): no scipy."""
    if df < 1:
        raise ValueError(f"t_cdf needs df >= 1, got {df}")

    def betacf(a, b, x):
        tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1)
        d = 1.0 / (d if abs(d) > tiny else tiny)
        h = d
        for m in range(1, 300):
            for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                        -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
                d = 1.0 + num * d
                d = 1.0 / (d if abs(d) > tiny else tiny)
                c = 1.0 + num / c
                c = c if abs(c) > tiny else tiny
                h *= d * c
        return h

    def ibeta(a, b, x):  # regularised incomplete beta I_x(a, b)
        if x <= 0 or x >= 1:
            return float(x >= 1)
        lbt = (
            math.lgamma(a + b)
            - math.lgamma(a)
            - math.lgamma(b)
            + a * math.log(x)
            + b * math.log(1 - x)
        )
        if x < (a + 1) / (a + b + 2):
            return math.exp(lbt) * betacf(a, b, x) / a
        return 1.0 - math.exp(lbt) * betacf(b, a, 1 - x) / b

    tail = 0.5 * ibeta(df / 2, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


# 200 t_cdf calls each, and a figure's bands ask for the same few thousands of times
@functools.lru_cache(maxsize=None)
def t_quantile(df, q=0.975):
    """Quantile of Student's t with df degrees of freedom, by bisection on
    ``t_cdf``. t_quantile(2) = 4.3027, t_quantile(9) = 2.2622."""
    if df < 1:
        raise ValueError(f"t_quantile needs df >= 1, got {df}")
    lo, hi = 0.0, 1e4
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < q else (lo, mid)
    return (lo + hi) / 2


def tost_p(c, margin):
    """Two one-sided tests of equivalence: the p of H0 "|true difference| >= margin",
    the larger of the one-sided paired-t p's of d <= -margin and d >= margin. Below
    0.05 the difference lies within +-margin at the 5 % level (its 90 % t interval
    lies inside). None with fewer than 2 pairs."""
    n, d, sd = c.get("n") or 0, c.get("diff"), c.get("sd")
    if n < 2 or d is None or sd is None or sd != sd:
        return None
    if sd == 0:
        return 0.0 if abs(d) < margin else 1.0
    se = sd / math.sqrt(n)
    return max(1.0 - t_cdf((d + margin) / se, n - 1), t_cdf((d - margin) / se, n - 1))


def p_value(c):
    """Two-sided paired-t p of a contrast (``paired``/``contrast``); None with
    fewer than 2 pairs; 0.0 when every difference is the same non-zero number. A
    contrast registered as an equivalence test (``tost_margin``) gets ``tost_p``."""
    if c.get("tost_margin") is not None:
        return tost_p(c, c["tost_margin"])
    n, d, sd = c.get("n") or 0, c.get("diff"), c.get("sd")
    if n < 2 or d is None or sd is None or sd != sd:
        return None
    if sd == 0:
        return 1.0 if d == 0 else 0.0
    return 2.0 * (1.0 - t_cdf(abs(d) / (sd / math.sqrt(n)), n - 1))


def holm(ps):
    """Holm's step-down adjusted p-values of a family, in the order given (None
    stays None and does not count in the family size)."""
    idx = sorted((i for i, p in enumerate(ps) if p is not None), key=lambda i: ps[i])
    m, out, running = len(idx), list(ps), 0.0
    for j, i in enumerate(idx):
        running = max(running, min(1.0, (m - j) * ps[i]))
        out[i] = running
    return out


def mean_ci(xs):
    """(mean, half-width of the two-sided 95 % Student-t interval, n - 1 dof).
    The half-width is NaN for a single value."""
    xs = [float(x) for x in xs]
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, float("nan")
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    return m, t_quantile(len(xs) - 1) * sd / math.sqrt(len(xs))


def paired(a, b):
    """Paired contrast of two arms measured on the same seeds (or batches).

    a, b: dicts seed -> value, or equal-length lists in the same seed order.
    Returns {"diff": mean of a - b, "half": its t half-width, "n": pairs,
    "sd": sd of the differences, "mde": the smallest true difference this n and
    sd would detect with 80 % power at the 5 % level (two-sided, normal
    approximation t_{0.975} + z_{0.8} on the t scale), "per_seed": the
    differences}. Seeds present in only one arm are left out."""
    if isinstance(a, dict):
        keys = [k for k in a if k in b]
        d = [float(a[k]) - float(b[k]) for k in keys]
    else:
        if len(a) != len(b):
            raise ValueError(f"paired arms need the same seeds: {len(a)} against {len(b)} values")
        d = [float(x) - float(y) for x, y in zip(a, b)]
    if not d:
        raise ValueError("paired contrast of arms that share no seed")
    m, h = mean_ci(d)
    n = len(d)
    sd = math.sqrt(sum((x - m) ** 2 for x in d) / (n - 1)) if n > 1 else float("nan")
    mde = (t_quantile(n - 1) + 0.8416) * sd / math.sqrt(n) if n > 1 else float("nan")
    return {"diff": m, "half": h, "n": n, "sd": sd, "mde": mde, "per_seed": d}


def seeds_needed(sd, effect, most=1000):
    """The smallest number of pairs n whose smallest detectable effect (paired's
    "mde": (t_{0.975, n-1} + z_{0.8}) * sd / sqrt(n)) is at most ``effect``, for a
    paired sd ``sd``; None if sd is undefined or more than ``most`` would be needed."""
    if sd is None or sd != sd or effect is None or effect <= 0:
        return None
    for n in range(2, most + 1):
        if (t_quantile(n - 1) + 0.8416) * sd / math.sqrt(n) <= effect:
            return n
    return None


def contrast(a, b, predicted, seeds=None):
    """The primary (or secondary) contrast of an experiment: paired(a, b) over the
    seeds where both arms have a value, plus ``predicted`` (the sign the paper
    predicts, fixed in the docstring before any result) and ``seeds``.

    a, b: per-seed values in the order of ``seeds`` (None where undefined), or a
    number b for a one-sample contrast against a reference (then diff = mean of
    a - b and half its one-sample t interval). With no shared seed every number
    is None and n = 0."""
    seeds = list(range(len(a))) if seeds is None else list(seeds)
    if not isinstance(b, (list, tuple)):
        b = [b] * len(a)
    if not len(seeds) == len(a) == len(b):
        raise ValueError(
            f"contrast needs one value per seed: {len(seeds)} seeds, {len(a)} and {len(b)} values"
        )
    ok = lambda x: x is not None and x == x
    keep = [(s, x, y) for s, x, y in zip(seeds, a, b) if ok(x) and ok(y)]
    if not keep:
        return {"diff": None, "half": None, "n": 0, "sd": None, "mde": None, "per_seed": [],
                "seeds": [], "predicted": predicted}
    out = paired([x for _, x, _ in keep], [y for _, _, y in keep])
    return {**out, "seeds": [s for s, _, _ in keep], "predicted": predicted}


def verdict(c, margin):
    """The verdict on a claim that a contrast is about 0, with an equivalence
    margin fixed before the run: *agree* if the 95 % interval lies inside
    (-margin, margin), *contradict* if it lies wholly outside, else
    *inconclusive*."""
    if c["diff"] is None or c["half"] is None or c["half"] != c["half"]:
        return "inconclusive (too few seeds)"
    lo, hi = c["diff"] - c["half"], c["diff"] + c["half"]
    if -margin < lo and hi < margin:
        return f"agree: the interval lies inside +-{margin:g}"
    if lo > margin or hi < -margin:
        return f"contradict: the interval lies outside +-{margin:g}"
    return f"inconclusive: the interval crosses +-{margin:g}"


def print_contrasts(contrasts, label="primary"):
    """One line per contrast: diff ± half (n, 95 % t; smallest detectable; predicted)."""
    num = lambda x: "n/a" if x is None or x != x else f"{x:.4g}"
    for name, c in contrasts.items():
        print(f"{label}: {name}: {num(c['diff'])} ± {num(c['half'])} (n={c['n']}, 95% t; "
              f"smallest detectable {num(c['mde'])}; predicted {c['predicted']})")


def ci(xs):
    """mean_ci over the values that exist, as [mean, half-width]; None where undefined."""
    xs = [x for x in xs if x is not None and x == x]
    if not xs:
        return [None, None]
    m, h = mean_ci(xs)
    return [m, None if h != h else h]


def pearson(xs, ys):
    """The sample correlation of paired values; None when either is constant."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    cov = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    var = math.sqrt(sum((x - mx) ** 2 for x in xs) * sum((y - my) ** 2 for y in ys))
    return cov / var if var else None


def fmt(mc, digits=3):
    """'m ± h' for a [mean, half-width] pair."""
    m, h = mc
    if m is None:
        return "n/a"
    return f"{m:.{digits}f}" + (f" ± {h:.{digits}f}" if h is not None else "")
