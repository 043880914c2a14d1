"""The leaderboard: result folders side by side, as one self-contained HTML page (`document`).

Per division a table of systems (score: the geometric mean of speedups over the reference, valid
workloads, what is missing), then per workload the speedup of every system as bars and a table of
step times. Each result's own numbers are shown as they are: `suite check` is what verifies them.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..document import blocks as B
from ..document.render import write_html
from .check import read_result
from .manifest import SuiteError


def _label(d: dict, seen: dict[str, int]) -> str:
    base = f"{d['system'].get('name', '?')}"  # (names its device where it replaces the system's)
    seen[base] = seen.get(base, 0) + 1
    return base if seen[base] == 1 else f"{base} #{seen[base]}"


def leaderboard(folders: list[str | os.PathLike]) -> dict:
    """The leaderboard's document (`document.checks` schema) of result folders."""
    if not folders:
        raise SuiteError("leaderboard: no result folders")
    results = [read_result(f) for f in folders]
    suites = {(d.get("suite"), d.get("version")) for d in results}
    if len(suites) > 1:
        raise SuiteError(f"leaderboard: results of different suites: {sorted(map(str, suites))}")
    suite, version = next(iter(suites))
    seen: dict[str, int] = {}
    labels = [_label(d, seen) for d in results]
    sections = []
    for division in ("closed", "open"):
        mine = [(lb, d) for lb, d in zip(labels, results) if d.get("division") == division]
        if not mine:
            continue
        mine.sort(key=lambda x: -(x[1]["score"].get("score") or x[1]["score"].get("partial_score") or 0))
        rows = [
            {
                "rank": i + 1,
                "system": lb,
                "score": d["score"].get("score"),
                "partial": d["score"].get("partial_score"),
                "valid": f"{d['score'].get('valid')}/{d['score'].get('workloads')}",
                "missing": ", ".join(d["score"].get("missing") or []) or "-",
                "changes": len(d.get("changes") or []),
                "reference": d["reference_system"].get("name"),
            }
            for i, (lb, d) in enumerate(mine)
        ]
        names = [w["name"] for w in mine[0][1]["workloads"]]
        series = [
            {
                "name": lb,
                "values": [next((w.get("speedup") for w in d["workloads"] if w["name"] == n), None) for n in names],
            }
            for lb, d in mine
        ]
        steps = []
        for n in names:
            row: dict = {"workload": n}
            for lb, d in mine:
                w: dict = next((x for x in d["workloads"] if x["name"] == n), {})
                row[lb] = w.get("step_s")
                row["npus"] = w.get("npus")
                row["kind"] = w.get("kind")
            steps.append(row)
        cols = [("workload", "workload", "str"), ("kind", "kind", "str"), ("npus", "NPUs", "int")]
        cols += [(lb, f"{lb}: s per step", "float") for lb, _ in mine]
        sections.append(
            B.section(
                f"{division}-division",
                f"{division} division",
                [
                    B.text(
                        "Score: the geometric mean over the suite's workloads of each one's speedup over the "
                        "reference system (its step time there over the system's); a system that cannot run "
                        "every workload has no score, only the partial mean of those it ran."
                        + (
                            " Open results declare their changes (re-parallelized, transformed)."
                            if division == "open"
                            else ""
                        )
                    ),
                    B.table(
                        "systems",
                        [
                            ("rank", "rank", "int"),
                            ("system", "system", "str"),
                            ("score", "score (geomean speedup)", "float"),
                            ("partial", "partial score", "float"),
                            ("valid", "valid workloads", "str"),
                            ("missing", "missing", "str"),
                            ("changes", "declared changes", "int"),
                            ("reference", "reference", "str"),
                        ],
                        rows,
                        bars=("score",),
                    ),
                    {
                        "type": "bars",
                        "title": "speedup over the reference, per workload",
                        "unit": "x",
                        "categories": names,
                        "series": series,
                    },
                    B.table("step time per workload", cols, steps),
                ],
            )
        )
    about = [
        B.text(
            f"{suite} v{version}: {len(results)} result(s). Each number is the result's own; run "
            "`chakra suite check DIR` to derive it again."
        ),  # fmt: skip
        B.table(
            "results",
            [
                ("system", "system", "str"),
                ("division", "division", "str"),
                ("about", "system description", "str"),
                ("tool", "chakra-trace", "str"),
                ("created", "created", "str"),
                ("wall", "wall s", "float"),
            ],
            [
                {
                    "system": lb,
                    "division": d.get("division"),
                    "about": d["system"].get("description"),
                    "tool": (d.get("versions") or {}).get("chakra-trace"),
                    "created": d.get("created"),
                    "wall": d.get("wall_s"),
                }
                for lb, d in zip(labels, results)
            ],
        ),  # fmt: skip
    ]
    sections.append(B.section("results", "results", about))
    return {"title": f"{suite} v{version} leaderboard", "sections": sections}


def write_leaderboard(folders: list[str | os.PathLike], out: str | os.PathLike) -> Path:
    return write_html(leaderboard(folders), out)
