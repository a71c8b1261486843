"""The load harness's result files: one JSON file per table, which docs/benchmarks.md shows.

Each file is one table of one run, with the run's date and command and the machine it ran on:

    {
      "date": "2026-12-03",
      "command": "scripts/load",
      "machine": "a machine of 2 logical cores (AMD EPYC), Linux 6.18.44",
      "columns": ["configuration", "requests/s", ...],
      "rows": [
        ["upstream direct", "62,377", ...],
        ...
      ],
      "notes": ["32 connections, 10 s per configuration, ..."]
    }

Cells are the report's own text ("62,377", "0.75× (0.64×–0.81×)"), so the page shows exactly what
the harness printed. `notes` (optional) are paragraphs shown under the table. The test
`crates/idem-bench/tests/benchmarks_doc.rs` renders each file between its markers in
docs/benchmarks.md and fails when the page differs; `IDEM_BLESS=1` rewrites the page.

As a module: `write_table(directory, name, columns, rows, notes)`, the date today (UTC), the
command and machine from the environment (LOAD_COMMAND, LOAD_MACHINE, which scripts/load sets).

As a command: `results.py DIRECTORY REPORT.md`, one file per table of a markdown report of
`idem-bench-curves` (the curves and counts modes), each named for its `#### Heading`; the
paragraphs between a heading and its table become the table's notes, before any given on the
command line with `--note TEXT`.
"""

import datetime
import json
import os
import re
import sys

# The tables of idem-bench-curves' report, by heading (without its "(medians of N rounds)").
CURVE_TABLES = {
    "Connections": "curve-connections",
    "Body size": "curve-body",
    "Stored keys": "curve-keys",
    "Purging expired keys": "curve-purge",
    "Counting and listing records": "curve-census",
    "Counted per new key": "counts",
}


def dumps(table):
    """The file's text: the table's fields in a fixed order, one row per line."""
    line = lambda value: json.dumps(value, ensure_ascii=False)
    parts = [f'  "{key}": {line(table[key])}' for key in ("date", "command", "machine", "columns")]
    rows = ",\n".join(f"    {line(row)}" for row in table["rows"])
    parts.append(f'  "rows": [\n{rows}\n  ]')
    if table.get("notes"):
        notes = ",\n".join(f"    {line(note)}" for note in table["notes"])
        parts.append(f'  "notes": [\n{notes}\n  ]')
    return "{\n" + ",\n".join(parts) + "\n}\n"


def write_table(directory, name, columns, rows, notes=(), date=None, command=None, machine=None):
    """Writes DIRECTORY/NAME.json; returns its path."""
    rows = [list(row) for row in rows]
    for row in rows:
        if len(row) != len(columns):
            raise ValueError(f"{name}: a row of {len(row)} cells under {len(columns)} columns")
    table = {
        "date": date or datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        "command": command or os.environ.get("LOAD_COMMAND", "scripts/load"),
        "machine": machine or os.environ.get("LOAD_MACHINE", "this machine"),
        "columns": list(columns),
        "rows": rows,
        "notes": list(notes),
    }
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{name}.json")
    with open(path, "w", encoding="utf-8") as out:
        out.write(dumps(table))
    return path


def read_runs(path):
    """The harness's wrk results file: for each run's name, its (requests/s, p50 ms, p99 ms),
    one per round."""
    runs = {}
    for line in open(path):
        name, rps, p50, p99 = line.split()
        runs.setdefault(name, []).append((float(rps), float(p50), float(p99)))
    return runs


def read_cpu(path):
    """The harness's CPU file: for each run's name, its figures (requests, then the CPU ticks
    of each party), one list per round."""
    cpu = {}
    for line in open(path):
        name, *values = line.split()
        cpu.setdefault(name, []).append([float(v) for v in values])
    return cpu


def read_server_counts(path):
    """The harness's server counts file: for each run's name, (requests, seconds, the counters'
    growth by name), one per round."""
    counts = {}
    for line in open(path):
        before, after = line.split(" / ")
        name, requests, seconds, *before = before.split()
        pairs = lambda words: dict((k, int(v)) for k, v in (w.split("=") for w in words))
        before, after = pairs(before), pairs(after.split())
        deltas = {k: after[k] - before[k] for k in before}
        counts.setdefault(name, []).append((int(requests), float(seconds), deltas))
    return counts


def print_table(results_dir, name, columns, rows, notes=()):
    """Prints a table of a report, its notes under it, and writes its result file into
    results_dir (when given)."""
    print("| " + " | ".join(columns) + " |")
    print("|" + " --- |" * len(columns))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    for note in notes:
        print(f"\n{note}")
    print()
    if results_dir:
        path = write_table(results_dir, name, columns, rows, notes)
        print(f"wrote {path}", file=sys.stderr)


def cells(line):
    """The cells of a markdown table line `| a | b |`."""
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def markdown_tables(text):
    """(heading, notes, columns, rows) for each `#### Heading` of a report that has a table."""
    tables = []
    heading, notes, columns, rows = None, [], None, []

    def flush():
        if heading is not None and columns is not None:
            tables.append((heading, notes, columns, rows))

    paragraph = []
    for line in text.splitlines() + [""]:
        if line.startswith("#### "):
            flush()
            heading, notes, columns, rows, paragraph = line[5:].strip(), [], None, [], []
        elif line.startswith("|"):
            if columns is None:
                columns = cells(line)
            elif not re.fullmatch(r"\|(\s*-+\s*\|)+", line.strip()):
                rows.append(cells(line))
        elif line.strip():
            if heading is not None and columns is None:
                paragraph.append(line.strip())
        elif paragraph:
            notes.append(" ".join(paragraph))
            paragraph = []
    flush()
    return tables


def main(argv):
    extra = []
    while "--note" in argv:
        at = argv.index("--note")
        extra.append(argv[at + 1])
        del argv[at : at + 2]
    if len(argv) != 2:
        sys.exit("usage: results.py DIRECTORY REPORT.md [--note TEXT]...")
    directory, report = argv
    with open(report, encoding="utf-8") as text:
        tables = markdown_tables(text.read())
    for heading, notes, columns, rows in tables:
        match = re.fullmatch(r"(.*?)(?: \(medians of (\d+) rounds\))?", heading)
        title, rounds = match.group(1), match.group(2)
        name = CURVE_TABLES.get(title)
        if name is None:
            sys.exit(f"results.py: no result file for the table {heading!r}")
        if rounds:
            notes = [f"Medians of {rounds} rounds."] + notes
        path = write_table(directory, name, columns, rows, notes + extra)
        print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
