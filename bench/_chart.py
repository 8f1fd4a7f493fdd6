"""Plain SVG bar charts for docs/PERFORMANCE.md: ours against the peer, one pair of bars per table row.

No plotting library: a chart is a few dozen SVG elements written as text. Each
row's bars are scaled to that row's larger value (rows measure different things,
from calls/s to ops/s), so a chart compares ours with the peer *within* a row;
the figures and the ratio are printed beside the bars. Charts live in
``docs/perf/NAME.svg``; :func:`chart_section` returns the Markdown line that
shows one under its table.

    python bench/charts.py     # (re)draws every chart from the tables already in docs/PERFORMANCE.md
"""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import escape

ROOT = Path(__file__).resolve().parent.parent
CHART_DIR = ROOT / "docs" / "perf"

OURS_COLOUR, PEER_COLOUR = "#2f6fdf", "#9aa3b2"
WIDTH, LABEL_W, BAR_W, ROW_H = 900, 330, 400, 46


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.2f}".rstrip("0").rstrip(".")


def bar_chart(title: str, rows: list[tuple[str, float, float, str | None]], *, ours: str = "ours", peer: str = "peer",
              unit: str = "", higher_is_better: bool = True) -> str:
    """An SVG (as text): per row ``(label, ours, peer, ratio)`` a bar for each, scaled to the row's larger value;
    ``ratio`` is the table's own (e.g. a median of paired ratios), else None: ours/peer of the two figures."""
    height = 58 + ROW_H * len(rows) + 26
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
           'font-family="system-ui, sans-serif" font-size="12">',
           f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>',
           f'<text x="12" y="22" font-size="15" font-weight="600" fill="#1d2330">{escape(title)}</text>',
           f'<rect x="12" y="34" width="12" height="12" fill="{OURS_COLOUR}"/>'
           f'<text x="30" y="44" fill="#1d2330">{escape(ours)}</text>',
           f'<rect x="{30 + 8 * len(ours) + 20}" y="34" width="12" height="12" fill="{PEER_COLOUR}"/>'
           f'<text x="{30 + 8 * len(ours) + 38}" y="44" fill="#1d2330">{escape(peer)}</text>',
           f'<text x="{WIDTH - 12}" y="44" text-anchor="end" fill="#667085">{escape(unit)}'
           f'{"; higher is better" if higher_is_better else "; lower is better"}; bars scaled per row</text>']
    for i, (label, a, b, given) in enumerate(rows):
        y = 58 + ROW_H * i
        top = max(a, b) or 1.0
        short = label if len(label) <= 46 else label[:44] + "…"
        ratio = number(given) if given else (a / b if higher_is_better else b / a) if a and b else 0.0
        out.append(f'<text x="12" y="{y + 22}" fill="#1d2330"><title>{escape(label)}</title>{escape(short)}</text>')
        for j, (v, colour) in enumerate(((a, OURS_COLOUR), (b, PEER_COLOUR))):
            w = max(1.0, BAR_W * v / top)
            yy = y + 6 + j * 17
            out.append(f'<rect x="{LABEL_W}" y="{yy}" width="{w:.1f}" height="14" rx="2" fill="{colour}"/>')
            out.append(f'<text x="{LABEL_W + w + 6:.1f}" y="{yy + 11}" fill="#1d2330">{escape(_fmt(v))}</text>')
        good = ratio >= 1.0
        out.append(f'<text x="{WIDTH - 12}" y="{y + 22}" text-anchor="end" font-weight="600" '
                   f'fill="{"#1a7f37" if good else "#c62828"}">{ratio:.2f}x</text>')
        out.append(f'<line x1="12" x2="{WIDTH - 12}" y1="{y + ROW_H - 2}" y2="{y + ROW_H - 2}" stroke="#eef0f4"/>')
    out.append(f'<text x="12" y="{height - 8}" fill="#667085">ratio: the table\'s ours vs {escape(peer)} '
               '(1.0x or more in green)</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


#: the charts the benches draw: section -> (chart file, title, label columns, ours column, peer column,
#: ratio column, ours label, peer label, unit)
CHARTS = {
    "server": ("server-calls", "MCP server: calls/s, ours vs the SDK's MCPServer", (0,), 2, 3, 4, "openfunctions-mcp",
               "SDK MCPServer", "calls/s"),
    "store": ("store-ops", "Store: operations/s, ours vs the raw peer", (0, 2), 1, 3, 4, "ours", "raw peer", "ops/s"),
}


def chart_for(section: str, rows: list[list[object]]) -> str:
    """Draw the chart of bench section ``section`` from its table's rows (cells as in the table); return the
    Markdown line that shows it."""
    chart, title, labels, ours, peer, ratio, ours_label, peer_label, unit = CHARTS[section]
    data = [(" — ".join(str(r[i]) for i in labels), number(str(r[ours])), number(str(r[peer])), str(r[ratio]))
            for r in rows]
    return chart_section(chart, title, data, ours=ours_label, peer=peer_label, unit=unit)


def write_chart(name: str, svg: str) -> Path:
    CHART_DIR.mkdir(parents=True, exist_ok=True)
    path = CHART_DIR / f"{name}.svg"
    path.write_text(svg)
    return path


def chart_section(name: str, title: str, rows: list[tuple[str, float, float, str | None]], **kw: object) -> str:
    """Draw the chart into docs/perf/NAME.svg and return the Markdown line that shows it (paths relative to docs/)."""
    write_chart(name, bar_chart(title, rows, **kw))  # type: ignore[arg-type]
    return f"![{title}](perf/{name}.svg)"


def number(cell: str) -> float:
    """A table cell's figure: ``1,625`` -> 1625.0, ``2.08 ms`` -> 2.08."""
    return float(cell.strip().split()[0].replace(",", "").rstrip("x×"))


__all__ = ["CHARTS", "bar_chart", "chart_for", "chart_section", "number", "write_chart"]
