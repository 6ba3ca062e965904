"""Exact integer linear algebra for the index solver: Bezout, Smith normal form.

Everything here works on Python `int`s (arbitrary precision, no floats).  Matrices are lists
of rows.  The Smith normal form follows seed 004 Algorithm 1 in spirit (elementary row and
column operations, Bezout steps when the pivot does not divide an entry), organised the
usual way: a pivot is cleaned until it divides everything in the remaining block, which
yields the divisibility chain `s1 | s2 | ...` directly instead of the report's final repair
loop (its "go back to step 1").
"""
from __future__ import annotations

Matrix = list[list[int]]


def ext_gcd(a: int, b: int) -> tuple[int, int, int]:
    """`(g, x, y)` with `x*a + y*b == g == gcd(a, b) >= 0` (seed 004 Algorithm 2)."""
    r0, r1, s0, s1, t0, t1 = a, b, 1, 0, 0, 1
    while r1 != 0:
        q = r0 // r1
        r0, r1 = r1, r0 - q * r1
        s0, s1 = s1, s0 - q * s1
        t0, t1 = t1, t0 - q * t1
    if r0 < 0:
        r0, s0, t0 = -r0, -s0, -t0
    return r0, s0, t0


def identity(n: int) -> Matrix:
    return [[int(i == j) for j in range(n)] for i in range(n)]


def matmul(a: Matrix, b: Matrix) -> Matrix:
    inner = len(b)
    cols = len(b[0]) if b else 0
    return [[sum(row[k] * b[k][j] for k in range(inner)) for j in range(cols)] for row in a]


def determinant(m: Matrix) -> int:
    """Exact determinant (Bareiss fraction-free elimination)."""
    n = len(m)
    if n == 0:
        return 1
    a = [row[:] for row in m]
    sign, prev = 1, 1
    for k in range(n - 1):
        if a[k][k] == 0:
            swap = next((i for i in range(k + 1, n) if a[i][k] != 0), None)
            if swap is None:
                return 0
            a[k], a[swap] = a[swap], a[k]
            sign = -sign
        for i in range(k + 1, n):
            for j in range(k + 1, n):
                a[i][j] = (a[i][j] * a[k][k] - a[i][k] * a[k][j]) // prev
        prev = a[k][k]
    return sign * a[n - 1][n - 1]


class _SNF:
    """Working state: S is transformed in place; U, V (and V^-1) record the operations."""

    def __init__(self, m: Matrix, ncols: int):
        self.n, self.m = len(m), ncols
        self.S = [list(map(int, row)) for row in m]
        self.U = identity(self.n)
        self.V = identity(self.m)
        self.Vinv = identity(self.m)

    # --- elementary operations (each keeps S == U M V and V * Vinv == 1) ---------------
    def swap_rows(self, i: int, j: int) -> None:
        for mat in (self.S, self.U):
            mat[i], mat[j] = mat[j], mat[i]

    def swap_cols(self, i: int, j: int) -> None:
        for mat in (self.S, self.V):
            for row in mat:
                row[i], row[j] = row[j], row[i]
        self.Vinv[i], self.Vinv[j] = self.Vinv[j], self.Vinv[i]

    def combine_rows(self, a: int, b: int, x: int, y: int, z: int, w: int) -> None:
        """rows (a, b) <- (x*ra + y*rb, z*ra + w*rb); requires x*w - y*z == +-1."""
        for mat in (self.S, self.U):
            ra, rb = mat[a], mat[b]
            mat[a] = [x * p + y * q for p, q in zip(ra, rb)]
            mat[b] = [z * p + w * q for p, q in zip(ra, rb)]

    def combine_cols(self, a: int, b: int, x: int, y: int, z: int, w: int) -> None:
        """cols (a, b) <- (x*ca + y*cb, z*ca + w*cb); V^-1 gets the inverse row operation."""
        det = x * w - y * z
        assert det in (1, -1)
        for mat in (self.S, self.V):
            for row in mat:
                p, q = row[a], row[b]
                row[a], row[b] = x * p + y * q, z * p + w * q
        ra, rb = self.Vinv[a], self.Vinv[b]
        self.Vinv[a] = [det * (w * p - z * q) for p, q in zip(ra, rb)]
        self.Vinv[b] = [det * (-y * p + x * q) for p, q in zip(ra, rb)]

    # --- the algorithm ------------------------------------------------------------------
    def run(self) -> None:
        for t in range(min(self.n, self.m)):
            pivot = self._smallest(t)
            if pivot is None:
                break
            self.swap_rows(t, pivot[0])
            self.swap_cols(t, pivot[1])
            self._clean(t)
            if self.S[t][t] < 0:
                self._negate_row(t)

    def _negate_row(self, t: int) -> None:
        for mat in (self.S, self.U):
            mat[t] = [-v for v in mat[t]]

    def _smallest(self, t: int) -> tuple[int, int] | None:
        best: tuple[int, int] | None = None
        for i in range(t, self.n):
            for j in range(t, self.m):
                v = self.S[i][j]
                if v != 0 and (best is None or abs(v) < abs(self.S[best[0]][best[1]])):
                    best = (i, j)
        return best

    def _clean(self, t: int) -> None:
        """Zero row t and column t outside the pivot; make the pivot divide the rest."""
        S = self.S
        while True:
            for i in range(t + 1, self.n):
                a, b = S[t][t], S[i][t]
                if b == 0:
                    continue
                if b % a == 0:
                    self.combine_rows(t, i, 1, 0, -(b // a), 1)
                else:  # Bezout step: the pivot becomes gcd(a, b), strictly smaller
                    g, x, y = ext_gcd(a, b)
                    self.combine_rows(t, i, x, y, -(b // g), a // g)
            for j in range(t + 1, self.m):
                a, b = S[t][t], S[t][j]
                if b == 0:
                    continue
                if b % a == 0:
                    self.combine_cols(t, j, 1, 0, -(b // a), 1)
                else:
                    g, x, y = ext_gcd(a, b)
                    self.combine_cols(t, j, x, y, -(b // g), a // g)
            if any(S[i][t] for i in range(t + 1, self.n)):
                continue  # column operations refilled column t
            bad = next(((i, j) for i in range(t + 1, self.n) for j in range(t + 1, self.m)
                        if S[i][j] % S[t][t] != 0), None)
            if bad is None:
                return
            # Pull the offending row into row t: the next pass replaces the pivot by a gcd.
            self.combine_rows(t, bad[0], 1, 1, 0, 1)


def smith_normal_form_full(m: Matrix, ncols: int | None = None) -> tuple[Matrix, Matrix,
                                                                             Matrix, Matrix]:
    """`(S, U, V, V^-1)` with `S == U m V`, U and V unimodular, S diagonal, s_i | s_{i+1}."""
    if ncols is None:
        ncols = len(m[0]) if m else 0
    if any(len(row) != ncols for row in m):
        raise ValueError("smith_normal_form: ragged matrix")
    state = _SNF(m, ncols)
    state.run()
    return state.S, state.U, state.V, state.Vinv


def smith_normal_form(m: Matrix, ncols: int | None = None) -> tuple[Matrix, Matrix, Matrix]:
    """Smith normal form `S = U M V` (seed 004 section 4.1.1).

    S is diagonal with non-negative entries `s1 | s2 | ... | sR` followed by zeros, U (n x n)
    and V (m x m) are unimodular (integer, determinant +-1).  `ncols` gives the width of a
    matrix with no rows.
    """
    s, u, v, _ = smith_normal_form_full(m, ncols)
    return s, u, v


def rank_of(s: Matrix) -> int:
    """Rank of a matrix already in Smith normal form."""
    r = 0
    while r < min(len(s), len(s[0]) if s else 0) and s[r][r] != 0:
        r += 1
    return r
