"""The report's inline style sheet: the page carries it, so it needs no network and no file beside it."""

# Scores 1..5 on a red-to-green scale (ColorBrewer RdYlGn, readable with dark text).
CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5em auto; max-width: 1400px; padding: 0 1em; color: #1b1b1b; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { border-bottom: 1px solid #ccc; margin-top: 1.8em; }
nav a { margin-right: 1em; }
table { border-collapse: collapse; margin: .5em 0 1em; }
th, td { border: 1px solid #d0d0d0; padding: .25em .5em; vertical-align: top; text-align: left; }
thead th { background: #f2f2f2; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: .1em 1em; }
dl.facts dt { font-weight: 600; } dl.facts dd { margin: 0; }
.heatmaps { display: flex; flex-wrap: wrap; gap: 2em; } figure { margin: 0; }
table.heatmap td.cell { text-align: center; min-width: 3.2em; font-weight: 600; cursor: help; }
td.s1 { background: #d73027; color: #fff; } td.s2 { background: #fc8d59; } td.s3 { background: #fee08b; }
td.s4 { background: #91cf60; } td.s5 { background: #1a9850; color: #fff; } td.missing { background: #eee; color: #888; }
tr.accepted td.outcome { background: #d9f2d9; font-weight: 600; } tr.rejected td.outcome { background: #f8dede; }
pre.diff { background: #fafafa; border: 1px solid #ddd; padding: .5em; overflow-x: auto; white-space: pre-wrap; }
pre.diff span { display: block; } .add { background: #e6ffec; } .del { background: #ffebe9; }
.hunk { color: #6f42c1; } .file { font-weight: 600; }
td.excerpt { font-family: ui-monospace, monospace; font-size: .9em; max-width: 48em; white-space: pre-wrap; }
td.excerpt mark { background: #fff3a3; } .note { color: #555; } .num { text-align: right; }
article.edit.rejected h3 { color: #8a1c1c; } article.edit.accepted h3 { color: #1c6b1c; }
svg.scores { font-size: 11px; } svg.scores .grid { stroke: #e3e3e3; } svg.scores g line { stroke: #999; }
svg.scores .incumbent { fill: #fff; stroke: #555; stroke-width: 1.5; }
svg.scores .accepted .candidate { fill: #1a9850; } svg.scores .rejected .candidate { fill: #d73027; }
"""
