"""A line chart as a small self-contained SVG (no plotting dependency).

Log-scaled x axis (term frequency), linear y axis (milliseconds), one polyline per
series, a legend, and the axis ticks labelled; enough to show a curve in the docs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

__all__ = ["line_chart"]

_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")
_W, _H = 720, 400
_L, _R, _T, _B = 64, 180, 40, 52


def _nice_step(top: float) -> float:
    raw = top / 5
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)


def line_chart(
    title: str,
    xs: Sequence[float],
    series: Mapping[str, Sequence[float]],
    *,
    x_label: str,
    y_label: str,
    guide: tuple[str, float] | None = None,
) -> str:
    """The SVG text of ``series`` (name -> y per x) over log-scaled ``xs``; ``guide`` is
    a dashed horizontal line (label, y)."""
    lo, hi = math.log10(min(xs)), math.log10(max(xs))
    tops = [y for ys in series.values() for y in ys] + ([guide[1]] if guide else [])
    step = _nice_step(max(tops) * 1.05)
    y_top = step * math.ceil(max(tops) * 1.05 / step)
    pw, ph = _W - _L - _R, _H - _T - _B

    def px(x: float) -> float:
        return _L + (math.log10(x) - lo) / ((hi - lo) or 1) * pw

    def py(y: float) -> float:
        return _T + ph - y / y_top * ph

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
        f'viewBox="0 0 {_W} {_H}" font-family="sans-serif" font-size="12">',
        f'<rect width="{_W}" height="{_H}" fill="white"/>',
        f'<text x="{_L}" y="22" font-size="14" font-weight="bold">{escape(title)}</text>',
        f'<line x1="{_L}" y1="{_T + ph}" x2="{_L + pw}" y2="{_T + ph}" stroke="black"/>',
        f'<line x1="{_L}" y1="{_T}" x2="{_L}" y2="{_T + ph}" stroke="black"/>',
    ]
    y = 0.0
    while y <= y_top + 1e-9:
        out.append(
            f'<line x1="{_L}" y1="{py(y):.1f}" x2="{_L + pw}" y2="{py(y):.1f}" stroke="#ddd"/>'
            f'<text x="{_L - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:g}</text>'
        )
        y += step
    for x in xs:
        label = f"{x / 1000:g}k" if x >= 1000 else f"{x:g}"
        out.append(
            f'<line x1="{px(x):.1f}" y1="{_T + ph}" x2="{px(x):.1f}" y2="{_T + ph + 4}" '
            f'stroke="black"/><text x="{px(x):.1f}" y="{_T + ph + 18}" '
            f'text-anchor="middle">{label}</text>'
        )
    out.append(
        f'<text x="{_L + pw / 2}" y="{_H - 10}" text-anchor="middle">{escape(x_label)}</text>'
        f'<text transform="translate(16,{_T + ph / 2}) rotate(-90)" '
        f'text-anchor="middle">{escape(y_label)}</text>'
    )
    if guide:
        out.append(
            f'<line x1="{_L}" y1="{py(guide[1]):.1f}" x2="{_L + pw}" y2="{py(guide[1]):.1f}" '
            f'stroke="#888" stroke-dasharray="6 4"/><text x="{_L + pw - 4}" '
            f'y="{py(guide[1]) - 5:.1f}" text-anchor="end" fill="#555">{escape(guide[0])}</text>'
        )
    for i, (name, ys) in enumerate(series.items()):
        color = _COLORS[i % len(_COLORS)]
        points = " ".join(f"{px(x):.1f},{py(v):.1f}" for x, v in zip(xs, ys, strict=True))
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{points}"/>')
        out += [
            f'<circle cx="{px(x):.1f}" cy="{py(v):.1f}" r="3" fill="{color}"/>'
            for x, v in zip(xs, ys, strict=True)
        ]
        ly = _T + 14 + i * 20
        out.append(
            f'<line x1="{_W - _R + 14}" y1="{ly}" x2="{_W - _R + 38}" y2="{ly}" '
            f'stroke="{color}" stroke-width="2"/>'
            f'<text x="{_W - _R + 44}" y="{ly + 4}">{escape(name)}</text>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"
