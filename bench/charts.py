"""Draw the SVG charts of docs/PERFORMANCE.md from the tables already there (no benchmark is re-run).

    python bench/charts.py

The benchmarks draw the same charts themselves when they rewrite their
sections (``_chart.chart_section``); this script redraws them from the last
published figures, e.g. after the chart style changed.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _chart import CHARTS, chart_for  # noqa: E402
from _report import PERF  # noqa: E402


def table_rows(section: str) -> list[list[str]]:
    """The cells of the first Markdown table in ``section`` (header and rule left out)."""
    rows, started = [], False
    for line in section.splitlines():
        if line.startswith("|"):
            started = True
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif started:
            break
    return rows[2:]


def main() -> int:
    text = PERF.read_text()
    for name in CHARTS:
        start, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
        if start not in text:
            print(f"no section {name!r} in {PERF}", file=sys.stderr)
            continue
        rows = table_rows(text.split(start, 1)[1].split(end, 1)[0])
        print(f"{chart_for(name, rows)}  ({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
