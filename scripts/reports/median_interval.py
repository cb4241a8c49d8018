"""Whether a sitting's repeats can tell a target met from missed (a part of the scaling report).

The report judges the paired targets on the median of a handful of repeats. On a shared
machine that median moves with the sitting, so beside it the report gives an interval that
holds the median of the machine's distribution (whatever its shape) with known confidence:
between the k-th smallest and the k-th largest of n repeats, the median lies with
probability 1 - 2 P(Binomial(n, 1/2) < k). No assumption of normal noise, which these
sittings are not (one repeat in a slow stretch is common). With fewer than 5 repeats no such
interval reaches 90%, and the report says so instead of guessing.
"""

import math

CONFIDENCE = 0.9


def median_interval(values, confidence=CONFIDENCE):
    """(low, high, level): the narrowest order-statistic interval around the median whose
    level (probability of holding the population median) is at least `confidence`; None when
    there are too few values for that."""
    xs = sorted(values)
    n = len(xs)
    best = None
    for k in range(1, n // 2 + 1):
        below = sum(math.comb(n, i) for i in range(k)) / 2**n
        level = 1 - 2 * below
        if level < confidence:
            break
        best = (xs[k - 1], xs[n - k], level)
    return best


def verdict(values, threshold, higher_is_better, fmt):
    """(text, decided, interval): how the repeats' interval (median_interval's, or None) lies
    against the target's threshold. decided is True or False when the whole interval is on
    one side, None when it straddles the threshold or there are too few repeats; the text
    says which, with the interval."""
    iv = median_interval(values)
    if iv is None:
        return (f"{len(values)} repeats are too few for a {CONFIDENCE:.0%} interval of the median "
                "(5 or more give one)"), None, None
    lo, hi, level = iv
    span = f"with {level:.0%} confidence the sitting's median lies between {fmt(lo)} and {fmt(hi)}"
    good = (lambda v: v >= threshold) if higher_is_better else (lambda v: v <= threshold)
    if good(lo) and good(hi):
        return f"{span}: met beyond this sitting's noise", True, iv
    if not good(lo) and not good(hi):
        return f"{span}: missed beyond this sitting's noise", False, iv
    return f"{span}, on both sides of {fmt(threshold)}: these repeats cannot tell", None, iv
