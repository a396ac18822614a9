"""Stratified assignment of images to splits: every class's image count per split within one
image of its ideal share, split sizes exact.

A split s of size n_s out of N images should hold ``n_s / N * n_c`` of the n_c images showing
class c. Images show several classes, so this is a constrained assignment; it is solved in two
steps, a few times over:

1. **deal** (iterative stratification, Sechidis et al. 2011): repeatedly take the class with the
   fewest images still unassigned, and give each of them to the split that still needs that class
   most (ties: the split with most room left), never past a split's size; images without boxes
   fill the room left.
2. **improve**: swap pairs of images between splits (sizes stay exact) while a swap lowers
   ``sum over splits and classes of P * max(0, |d| - 1)^2 + d^2``, d being the count minus the
   ideal: a violation of the one-image tolerance costs far more than any deviation within it.
   Swap candidates are scored all at once with one matrix product per pair of splits.

When violations remain (images' class combinations can make the tolerance hard to reach from one
start), the deal is repeated from other orders, and the best result is kept. Everything depends
only on the rows' order, which the caller derives from the seed and the samples' identities.
"""

from __future__ import annotations

import numpy as np

__all__ = ["assign_stratified", "deviation"]

TOLERANCE = 1.0 + 1e-9
PENALTY = 64.0  # weight of the part of a deviation beyond one image
ATTEMPTS = 8  # deals from different orders when violations remain
MAX_ROUNDS = 20000
MAX_PAIRS = 48  # violating (split, class) pairs tried per round, worst first
MAX_GIVERS, MAX_TAKERS = 256, 4096  # swap candidates per (split, class) pair


def assign_stratified(present: np.ndarray, sizes: np.ndarray, attempts: int = ATTEMPTS
                      ) -> np.ndarray:
    """The split index of each row of ``present`` ((N, C) bool: the classes each image shows)
    for splits of ``sizes`` ((S,) ints summing to N)."""
    n = len(present)
    sizes = np.asarray(sizes, np.int64)
    ideal = (sizes / max(n, 1))[:, None] * present.sum(axis=0)[None, :].astype(np.float64)
    best, best_score = None, None
    for attempt in range(attempts):
        order = np.arange(n) if attempt == 0 else \
            np.random.default_rng(attempt).permutation(n)
        assignment = np.empty(n, np.int64)
        assignment[order] = _deal(present[order], sizes, ideal)
        excess = _counts(present, assignment, len(sizes)) - ideal
        _improve(present, assignment, excess)
        score = (_violation(excess), float((excess ** 2).sum()))
        if best_score is None or score < best_score:
            best, best_score = assignment, score
        if score[0] == 0:
            break
    assert best is not None
    return best


def deviation(present: np.ndarray, assignment: np.ndarray, splits: int) -> np.ndarray:
    """(S,) the largest |images of a class in a split - its ideal share| of each split."""
    n = len(present)
    counts = _counts(present, assignment, splits)
    sizes = np.bincount(assignment, minlength=splits)
    ideal = (sizes / max(n, 1))[:, None] * present.sum(axis=0)[None, :]
    return np.abs(counts - ideal).max(axis=1) if present.shape[1] else np.zeros(splits)


def _counts(present: np.ndarray, assignment: np.ndarray, splits: int) -> np.ndarray:
    return np.stack([present[assignment == s].sum(axis=0) for s in range(splits)]
                    ).astype(np.float64)


def _violation(excess: np.ndarray) -> float:
    return float(np.maximum(np.abs(excess) - TOLERANCE, 0).sum())


def _deal(present: np.ndarray, sizes: np.ndarray, ideal: np.ndarray) -> np.ndarray:
    n = len(present)
    need = ideal.copy()
    room = sizes.copy()
    assignment = np.full(n, -1, np.int64)
    remaining = present.sum(axis=0).astype(np.int64)
    while True:
        candidates = np.flatnonzero(remaining > 0)
        if not len(candidates):
            break
        c = int(candidates[np.argmin(remaining[candidates])])  # the rarest class left
        for i in np.flatnonzero(present[:, c] & (assignment < 0)).tolist():
            score = np.where(room > 0, need[:, c], -np.inf)
            best = np.flatnonzero(score == score.max())
            s = int(best[np.argmax(room[best])])
            assignment[i] = s
            room[s] -= 1
            need[s] -= present[i]
            remaining -= present[i]
    for i in np.flatnonzero(assignment < 0).tolist():  # images without boxes
        s = int(np.argmax(room))
        assignment[i] = s
        room[s] -= 1
    return assignment


def _cost_steps(excess: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(change of the cost of each entry when its count grows by one, ... shrinks by one)."""
    def cost(d: np.ndarray) -> np.ndarray:
        return PENALTY * np.maximum(np.abs(d) - 1.0, 0.0) ** 2 + d * d

    now = cost(excess)
    return cost(excess + 1.0) - now, cost(excess - 1.0) - now


def _improve(present: np.ndarray, assignment: np.ndarray, excess: np.ndarray) -> None:
    """Apply improving swaps (see the module doc) until no violation is left or none helps."""
    weights = present.astype(np.float64)
    for _ in range(MAX_ROUNDS):
        size = np.abs(excess).reshape(-1)
        flat = np.argsort(-size, kind="stable")
        flat = flat[size[flat] > TOLERANCE][:MAX_PAIRS]
        if not len(flat):
            return
        grow, shrink = _cost_steps(excess)
        for s1, c in zip(*np.unravel_index(flat, excess.shape), strict=True):
            move = _best_swap(weights, present, assignment, excess, grow, shrink, int(s1),
                              int(c))
            if move is not None:
                break
        else:
            return
        a, b = move
        sa, sb = int(assignment[a]), int(assignment[b])
        excess[sa] += weights[b] - weights[a]
        excess[sb] += weights[a] - weights[b]
        assignment[a], assignment[b] = sb, sa


def _best_swap(weights: np.ndarray, present: np.ndarray, assignment: np.ndarray,
               excess: np.ndarray, grow: np.ndarray, shrink: np.ndarray, s1: int, c: int
               ) -> tuple[int, int] | None:
    """The swap of an image of split ``s1`` with an image of another split that moves class
    ``c`` of ``s1`` towards its ideal and lowers the cost most; None when none lowers it."""
    too_many = excess[s1, c] > 0
    has_c = present[:, c]
    givers = np.flatnonzero((assignment == s1) & (has_c if too_many else ~has_c))[:MAX_GIVERS]
    if not len(givers):
        return None
    g = weights[givers]
    best, best_gain = None, -1e-9
    for sb in range(len(excess)):
        if sb == s1:
            continue
        takers = np.flatnonzero((assignment == sb) & (~has_c if too_many else has_c))
        if not len(takers):
            continue
        t = weights[takers[:MAX_TAKERS]]
        # a: s1 -> sb changes its classes' entries (s1: -1, sb: +1); b: sb -> s1 the reverse;
        # classes both show do not change
        u = shrink[s1] + grow[sb]
        w = grow[s1] + shrink[sb]
        gains = (g @ u)[:, None] + (t @ w)[None, :] - (g * (u + w)) @ t.T
        k = int(np.argmin(gains))
        row, col = divmod(k, gains.shape[1])
        if gains[row, col] < best_gain:
            best, best_gain = (int(givers[row]), int(takers[col])), float(gains[row, col])
    return best
