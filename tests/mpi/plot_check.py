#!/usr/bin/env python3
"""Check a `zinf plot` SVG against the metrics files it was drawn from, independently of zinf.

usage: plot_check.py SVG --run METRICS:NAME:STEP_LINES [--run ...] [--exact] [--title T]

For every run: one series per panel (loss, grad_norm, lr, tokens_per_s) and a val_loss series when
the file has validation losses; each series has one point per step line that has a value (the
count the shell gives, from grep, must equal the values read here); x increases with the step;
the legend names the run. With --exact, every point's pixel is also computed from the axis tick
labels alone: two labelled ticks fix the data-to-pixel map (affine in the value, or in its log10
on a panel titled "log scale"), every other tick must lie on that map, and so must every point.
Prints one line "plot_check: N checks, M failed" and exits 1 when any failed."""
import json
import math
import re
import sys
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"
PANELS = ["loss", "grad_norm", "lr", "tokens_per_s"]
checks = 0
failures = 0


def check(cond, msg):
    global checks, failures
    checks += 1
    if not cond:
        failures += 1
        print("FAIL: " + msg, file=sys.stderr)
    return cond


def label_value(s):
    """A tick label as a number: 0.5, 2.5e-4, 12k, 1.25M."""
    mult = {"k": 1e3, "M": 1e6, "G": 1e9}
    if s and s[-1] in mult:
        return float(s[:-1]) * mult[s[-1]]
    return float(s)


def read_metrics(path):
    """Step -> values, read as the format says: non-step lines skipped, a step at or below the last
    one (a resumed run) drops the points from that step on, a last line without its newline is
    still being written."""
    rows = []
    with open(path) as f:
        text = f.read()
    lines = text.split("\n")
    partial = lines[-1] != ""
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            o = json.loads(line)
        except ValueError:
            if partial and i == len(lines) - 1:
                continue
            raise
        if "step" not in o:
            continue
        while rows and rows[-1]["step"] >= o["step"]:
            rows.pop()
        rows.append(o)
    return rows


def series_points(path_el):
    d = path_el.get("d", "")
    return [(float(x), float(y)) for _, x, y in re.findall(r"([ML])(-?[0-9.]+) (-?[0-9.]+)", d)]


def axis_map(texts, attr, log):
    """From labelled ticks, the map value -> pixel; checks that every tick lies on it."""
    pts = [(label_value(t.text), float(t.get(attr))) for t in texts]
    f = (lambda v: math.log10(v)) if log else (lambda v: v)
    if not check(len(pts) >= 2, "fewer than 2 tick labels on an axis"):
        return None
    (v0, p0), (v1, p1) = pts[0], pts[-1]
    scale = (p1 - p0) / (f(v1) - f(v0))
    m = lambda v: p0 + (f(v) - f(v0)) * scale
    for v, p in pts:
        check(abs(m(v) - p) < 0.02, "tick %s at %.2f px is off the map through the end ticks (%.2f)" % (v, p, m(v)))
    return m


def main():
    args = sys.argv[1:]
    svg = args.pop(0)
    runs, exact, title = [], False, None
    while args:
        a = args.pop(0)
        if a == "--run":
            metrics, name, nsteps = args.pop(0).rsplit(":", 2)
            runs.append((metrics, name, int(nsteps)))
        elif a == "--exact":
            exact = True
        elif a == "--title":
            title = args.pop(0)
    root = ET.parse(svg).getroot()  # well-formed, or this raises
    check(root.tag == NS + "svg", "the root is not an svg element")
    if title is not None:
        t = root.find(NS + "title")
        check(t is not None and t.text == title, "title %r, want %r" % (t.text if t is not None else None, title))
    all_series = root.findall(".//" + NS + "path[@class='series']")
    main_series = [p for p in all_series if p.get("data-series") in PANELS]
    check(len(main_series) == len(runs) * len(PANELS),
          "%d series paths in the four panels, want %d runs x 4" % (len(main_series), len(runs)))
    legend = root.findall(".//" + NS + "g[@class='legend-entry']")
    check(len(legend) == len(runs), "%d legend entries for %d runs" % (len(legend), len(runs)))
    for ri, (metrics, name, nsteps) in enumerate(runs):
        rows = read_metrics(metrics)
        check(len(rows) == nsteps, "%s: %d step lines read here, the shell counted %d" % (metrics, len(rows), nsteps))
        ltext = legend[ri].find(NS + "text") if ri < len(legend) else None
        ltext = ltext.text if ltext is not None else None
        check(ltext == name, "legend entry %d names %r, want %r" % (ri, ltext, name))
        has_val = any(isinstance(r.get("val_loss"), (int, float)) for r in rows)
        for key in PANELS + ["val_loss"]:
            panel = "loss" if key == "val_loss" else key
            g = root.find(".//" + NS + "g[@id='panel-%s']" % panel)
            if not check(g is not None, "no panel %s" % panel):
                continue
            paths = [p for p in g.findall(NS + "path") if p.get("data-run") == str(ri) and p.get("data-series") == key]
            if key == "val_loss" and not has_val:
                check(not paths, "%s: a val_loss series without validation losses" % metrics)
                continue
            if not check(len(paths) == 1, "%s: %d %s series in panel %s" % (metrics, len(paths), key, panel)):
                continue
            pts = series_points(paths[0])
            log = "log scale" in "".join(g.find(NS + "text[@class='panel-title']").itertext())
            data = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float)) and (not log or r[key] > 0)]
            want = nsteps if key != "val_loss" and all(isinstance(r.get(key), (int, float)) for r in rows) else len(data)
            check(len(pts) == len(data) == want, "%s %s: %d points drawn, %d values, want %d" %
                  (metrics, key, len(pts), len(data), want))
            xs = [x for x, _ in pts]
            check(all(b > a for a, b in zip(xs, xs[1:])), "%s %s: x does not increase with the step" % (metrics, key))
            if not exact:
                continue
            mx = axis_map(g.findall(".//" + NS + "text[@class='xtick']"), "x", False)
            my = axis_map(g.findall(".//" + NS + "text[@class='ytick']"), "y", log)
            if mx is None or my is None:
                continue
            bad = [(s, v, x, y, mx(s), my(v)) for (s, v), (x, y) in zip(data, pts)
                   if abs(mx(s) - x) > 0.02 or abs(my(v) - y) > 0.02]
            check(not bad, "%s %s: points off the axes' labels (step, value, x, y, want x, want y): %s" %
                  (metrics, key, bad[:3]))
    print("plot_check: %d checks, %d failed" % (checks, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
