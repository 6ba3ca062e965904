"""The terminal table of a results dict (bench/results.json), also used for docs/performance.md.

One block per workload and derivative; one row per system and N:

    system  N  time f  time derivative  ratio (Griewank: derivative / f)  C(f)  C(deriv)
    C ratio  peak memory of f and of the derivative  check

Cost-model counts are tensorlang's (the program as it will run, SPEC 3), shown on its rows.
Memory: `t` = tracemalloc peak (numpy / Python allocations), `r` = sampled peak RSS increase
(allocations outside Python: XLA, torch, compiled kernels).  `check`: the f value against the
numpy reference (examples/numpy_ref.py) and the derivative against the hand-derived numpy one.
"""
from __future__ import annotations

from typing import Any, Iterable

NA = "n/a"


def fmt_time(t: float | None) -> str:
    if t is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if t >= scale:
            return f"{t / scale:.3g} {unit}"
    return f"{t * 1e9:.3g} ns"


def fmt_bytes(b: int | None) -> str:
    if b is None:
        return "-"
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if b >= scale:
            return f"{b / scale:.3g} {unit}"
    return f"{b} B"


def fmt_count(c: int | None) -> str:
    if c is None:
        return NA
    return f"{c:.3g}" if c >= 1e6 else str(c)


def fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.3g}"


def fmt_cell(m: dict[str, Any] | None) -> str:
    """A measurement: its time, or why there is none."""
    if m is None:
        return "-"
    status = m.get("status")
    if status == "ok":
        mark = " !" if m.get("check") == "mismatch" else ""
        return fmt_time(m.get("time")) + mark
    return {"n/a": NA, "skipped": "skip", "error": "ERROR", "oom": "OOM",
            "timeout": "TIMEOUT"}.get(status, str(status))


def fmt_mem(m: dict[str, Any] | None, method: str) -> str:
    if not m or m.get("status") != "ok":
        return "-"
    if method == "tracemalloc":
        return fmt_bytes(m.get("peak_tracemalloc")) + " t"
    return fmt_bytes(m.get("peak_rss_delta")) + " r"


def check_text(f: dict[str, Any], d: dict[str, Any] | None) -> str:
    problems = []
    for tag, m in (("f", f), ("d", d)):
        if not m:
            continue
        if m.get("status") == "error":
            problems.append(f"{tag} error")
        elif m.get("check") == "mismatch":
            rel = m.get("max_rel_err")
            problems.append(f"{tag} MISMATCH" + (f" {rel:.1e}" if rel is not None else ""))
    if problems:
        return ", ".join(problems)
    checked = [m for m in (f, d) if m and m.get("check") == "ok"]
    return "ok" if checked else "-"


HEADER = ("system", "N", "time f", "time d", "d/f", "C(f)", "C(d)", "C(d)/C(f)",
          "mem f", "mem d", "check")
RIGHT = {1, 2, 3, 4, 5, 6, 7, 8, 9}


def _fmt_cost(cost: dict[str, Any], key: str) -> str:
    c = cost.get(key)
    if c is None:
        return NA
    # counted at an earlier stage than the default one (the simplifier timed out)
    return fmt_count(c["total"]) + ("*" if cost.get(key + "_message") else "")


def _row(rec: dict[str, Any], key: str | None) -> list[str]:
    f = rec["f"]
    d = rec["derivatives"].get(key) if key else None
    cost = rec.get("cost") or {}
    cf, cd = cost.get("f"), cost.get(key) if key else None
    has_cost = rec.get("cost") is not None
    c_f = _fmt_cost(cost, "f") if has_cost else ""
    c_d = _fmt_cost(cost, key) if has_cost and key else ""
    c_r = fmt_ratio(cd["total"] / cf["total"] if cd is not None and cf and cf["total"]
                    else None) \
        if has_cost and key else ""
    method = rec.get("mem_method", "tracemalloc")
    return [rec["label"], str(rec["N"]), fmt_cell(f), fmt_cell(d) if key else "",
            fmt_ratio(d.get("ratio")) if d else "", c_f, c_d, c_r, fmt_mem(f, method),
            fmt_mem(d, method) if key else "", check_text(f, d)]


def _layout(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for r in rows:
        cells = [c.rjust(w) if i in RIGHT else c.ljust(w) for i, (c, w) in
                 enumerate(zip(r, widths))]
        out.append("  " + "  ".join(cells).rstrip())
    return out


def blocks(data: dict[str, Any]) -> list[tuple[str, str | None, list[dict[str, Any]]]]:
    """(workload, derivative key or None, records) in the order they were run."""
    order: list[tuple[str, str | None]] = []
    by: dict[tuple[str, str | None], list[dict[str, Any]]] = {}
    for rec in data["records"]:
        keys = list(rec["derivatives"]) or [None]
        for k in keys:
            if (rec["workload"], k) not in by:
                order.append((rec["workload"], k))
                by[(rec["workload"], k)] = []
            by[(rec["workload"], k)].append(rec)
    return [(w, k, sorted(by[(w, k)], key=lambda r: (_sys_order(r), r["N"])))
            for w, k in order]


def _sys_order(rec: dict[str, Any]) -> int:
    order = ["numpy", "tensorlang", "jax", "torch"]
    return order.index(rec["system"]) if rec["system"] in order else len(order)


def notes(recs: Iterable[dict[str, Any]], key: str | None) -> list[str]:
    """Errors and mismatches in words (never silently)."""
    out = []
    for rec in recs:
        for tag, m in (("f", rec["f"]), (key, rec["derivatives"].get(key) if key else None)):
            if not m or not m.get("message"):
                continue
            if m.get("status") in ("error", "oom", "timeout") or m.get("check") == "mismatch":
                out.append(f"  ! {rec['label']} N={rec['N']} {tag}: {m['message']}")
    return out


def render(data: dict[str, Any], markdown: bool = False) -> str:
    lines: list[str] = []
    for workload, key, recs in blocks(data):
        label = recs[0]["derivatives"][key]["label"] if key else "(f only)"
        title = f"{workload} - {label}"
        rows = [list(HEADER)] + [_row(r, key) for r in recs]
        if markdown:
            lines += [f"#### {title}", "", _md_table(rows), ""]
        else:
            lines += [f"== {title}"] + _layout(rows)
        seen = set()
        for n in notes(recs, key):
            if n not in seen:
                seen.add(n)
                lines.append(n if not markdown else "- " + n.strip()[2:])
        if markdown:
            lines.append("")
    skipped = [s for s in data.get("skipped", []) if "cap" in s]
    if skipped:
        what = ", ".join(f"{s['workload']} N={s['N']} (cap {s['cap']})" for s in skipped)
        lines.append(("" if markdown else "") + f"skipped (size caps): {what}")
    failed = [s for s in data.get("skipped", []) if "error" in s]
    for s in failed:
        lines.append(f"failed: {s['workload']} N={s['N']}: {s['error']}")
    return "\n".join(lines)


def _md_table(rows: list[list[str]]) -> str:
    head, body = rows[0], rows[1:]
    align = ["---:" if i in RIGHT else ":---" for i in range(len(head))]
    out = ["| " + " | ".join(head) + " |", "| " + " | ".join(align) + " |"]
    out += ["| " + " | ".join(c.replace("|", "\\|") or " " for c in r) + " |" for r in body]
    return "\n".join(out)


def legend() -> str:
    return ("time: per call, the best of the interleaved rounds after warm-up; d/f: Griewank "
            "ratio (time of the derivative / time of f); C(f), C(d): tensorlang cost-model "
            "totals (SPEC 3); mem: peak, t = tracemalloc, r = sampled RSS increase; n/a: not "
            "supported yet; skip: N above the size cap; OOM / TIMEOUT: over the "
            "per-measurement memory allowance (--mem-limit) / time limit (--timeout); "
            "C(..)*: counted before the simplifier, which timed out; ! / MISMATCH: value "
            "disagrees with the numpy reference")
