#!/usr/bin/env python3
"""The documentation check: lessons teach, they do not narrate, and they quote only measured
numbers that the repository holds.

Run: python3 tests/test_docs.py [--root DIR] (from any folder). Standard library only.
Exits 0 when every check passes, 1 with one `file:line: ...` line per failure, 77 (skipped)
only if this Python lacks a module it needs.

Check 1, development history. The lessons (modules/*/README.md), README.md, docs/*.md and
every comment of the source files in modules/, solutions/, common/ and tests/ must not tell
how the course was made: no "session", "the issue", "the fifth run", "previous version",
"refactor", "worklog" (except as a link into docs/worklog/, where that history lives).
docs/results.md is checked too: dated runs of earlier versions go to docs/worklog/results_history.md.

Check 2, measured numbers. Every number that a lesson (or its NOTES.md) gives with a unit of measurement
(TFLOP/s, GB/s, TB/s, ms, us/µs, and speedups such as 1.05x or 1.05×), and every number in a
table column whose header names such a unit, must appear in a committed result file
(docs/results/*.json, *.txt, *.csv) to the precision printed: "378 TFLOP/s" matches 377.9,
"0.17" matches 0.167. A line with <!-- derived --> is exempt (arithmetic the lesson shows);
<!-- derived --> alone on a line exempts the paragraph, table or code block that follows.

Check 3, images. Every image a lesson or doc embeds (![...](path)) exists.

tests/docs_allowlist.txt names files not checked yet (one path per line, `#` comments).
"""
import argparse
import bisect
import glob
import os
import re
import sys

try:
    import json
except ImportError:  # a stripped-down Python without json cannot read the results
    print("test_docs: skipped: this Python has no json module")
    sys.exit(77)

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# ---------------------------------------------------------------------------------------------
# Check 1: development history

# Each pattern is a phrase that tells the course's history, never what a reader needs.
# Case-insensitive; \b keeps names such as gpu_session.sh or "issued" out.
HISTORY_PATTERNS = [
    (r"\bsessions?\b", "'session' (how the course was made)"),
    (r"\bthe issue\b(?!d)", "'the issue'"),
    (r"\bissue's\b", "'issue's'"),
    (r"\bissue\s*#?\d+", "an issue number"),
    (r"\bworklogs?\b", "'worklog' outside a link to docs/worklog/"),
    (r"\b(second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|\d+(st|nd|rd|th)) "
     r"(run|session)\b", "a numbered run"),
    (r"\bprevious run\b", "'previous run'"),
    (r"\b(earlier|previous|older|old|first) version\b", "an earlier version"),
    (r"\brefactor(ed|ing|s)?\b", "'refactor'"),
    (r"\blab notebook\b", "'lab notebook'"),
    (r"\b(we|I) (changed|rewrote|renamed|moved|reverted|tried)\b", "a change narrated"),
]
HISTORY_RES = [(re.compile(p, re.IGNORECASE), why) for p, why in HISTORY_PATTERNS]

# A markdown link into docs/worklog/ ([text](../../docs/worklog/07_x.md), or
# [text](worklog/07_x.md) from docs/) or a bare path to it.
WORKLOG_LINK = re.compile(r"\[[^\]]*\]\((?:[^)\s]*/)?worklog/[^)]*\)|\S*docs/worklog/\S*")

SOURCE_EXTS = {".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hpp", ".py", ".sh",
               ".cmake"}
HASH_COMMENT_EXTS = {".py", ".sh", ".cmake"}


def history_hits(text):
    """The reasons (one per pattern) why `text` tells development history."""
    text = WORKLOG_LINK.sub(" ", text)
    return [why for rx, why in HISTORY_RES if rx.search(text)]


def c_comments(lines):
    """(line number, comment text) of the // and /* */ comments of C++/CUDA source lines."""
    out, in_block = [], False
    for n, line in enumerate(lines, 1):
        i, comment, in_string = 0, [], None
        while i < len(line):
            ch = line[i]
            if in_block:
                end = line.find("*/", i)
                if end < 0:
                    comment.append(line[i:])
                    break
                comment.append(line[i:end])
                in_block, i = False, end + 2
                continue
            if in_string:
                if ch == "\\":
                    i += 2
                    continue
                if ch == in_string:
                    in_string = None
                i += 1
                continue
            if ch in "\"'":
                in_string = ch
            elif line.startswith("//", i):
                comment.append(line[i + 2:])
                break
            elif line.startswith("/*", i):
                in_block, i = True, i + 2
                continue
            i += 1
        if comment:
            out.append((n, " ".join(comment)))
    return out


def hash_comments(lines, docstrings):
    """(line number, text) of # comments, and of triple-quoted strings when `docstrings`."""
    out, in_doc = [], None
    for n, line in enumerate(lines, 1):
        if in_doc:
            out.append((n, line))
            if in_doc in line:
                in_doc = None
            continue
        if docstrings:
            m = re.search(r'("""|\'\'\')', line)
            if m and line.count(m.group(1)) == 1:
                in_doc = m.group(1)
                out.append((n, line))
                continue
            if m:
                out.append((n, line))
                continue
        in_string = None
        for i, ch in enumerate(line):
            if in_string:
                if ch == in_string:
                    in_string = None
            elif ch in "\"'":
                in_string = ch
            elif ch == "#":
                out.append((n, line[i + 1:]))
                break
    return out


def comment_lines(path, text):
    lines = text.splitlines()
    ext = os.path.splitext(path)[1]
    if ext in HASH_COMMENT_EXTS or os.path.basename(path) == "CMakeLists.txt":
        return hash_comments(lines, docstrings=ext == ".py")
    return c_comments(lines)


def markdown_lines(text):
    """(line number, text) of a markdown file, HTML comments (<!-- ... -->) left out."""
    text = re.sub(r"<!--.*?-->", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return list(enumerate(text.splitlines(), 1))


def docs_to_check(root):
    """The markdown files of check 1 (relative paths)."""
    files = ["README.md"]
    files += sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "modules",
                                                                                "*", "*.md")))
    files += sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs",
                                                                                "*.md")))
    return files


def sources_to_check(root):
    """The source files of check 1 (relative paths)."""
    found = []
    for top in ("modules", "solutions", "common", "tests"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in names:
                if os.path.splitext(name)[1] in SOURCE_EXTS or name == "CMakeLists.txt":
                    found.append(os.path.relpath(os.path.join(dirpath, name), root))
    return sorted(found)


# Files whose own text must name the phrases it looks for.
SELF = {os.path.join("tests", "test_docs.py")}


def check_history(root, skip):
    failures = []
    for rel in docs_to_check(root):
        if rel in skip or not os.path.exists(os.path.join(root, rel)):
            continue
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            for n, line in markdown_lines(f.read()):
                for why in history_hits(line):
                    failures.append(f"{rel}:{n}: development history: {why}: {line.strip()}")
    for rel in sources_to_check(root):
        if rel in skip or rel in SELF:
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for n, comment in comment_lines(rel, text):
            for why in history_hits(comment):
                failures.append(f"{rel}:{n}: development history in a comment: {why}: "
                                f"{comment.strip()}")
    return failures


# ---------------------------------------------------------------------------------------------
# Check 2: every measured number is in a result file

NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
# The units of a measurement, and how a result-file number converts to the unit's scale:
# a lesson's "35.8 ms" may come from ncu's "35,809,280 ns", its "5.7 µs" from 0.0057 ms.
UNITS = {
    "TFLOP/s": (1.0,), "TFLOPS": (1.0,), "GB/s": (1.0,), "GiB/s": (1.0,), "TB/s": (1.0, 1e-3),
    "ms": (1.0, 1e-6, 1e3), "us": (1.0, 1e-3, 1e3), "µs": (1.0, 1e-3, 1e3),
    "x": (1.0,), "×": (1.0,),
}
UNIT_RE = r"(?:TFLOP/s|TFLOPS|GB/s|GiB/s|TB/s|ms|us|µs)"
# A number directly followed by a unit; a speedup is a number with x or × right after it
# (1.05x), never followed by a digit (16x8 is a shape) or a letter.
MEASURE = re.compile(r"(?<![\w.=/^-])(" + NUMBER + r")\s?(" + UNIT_RE + r")(?![\w/])"
                     r"|(?<![\w.=/^-])(" + NUMBER + r")([x×])(?![\w\d.])")
# Numbers listed before a unit share it: "27.21 vs 35.09 TFLOP/s", "0.15-0.17 TFLOP/s".
LIST_SEP = r"(?:\s*(?:,|/|vs\.?|-|–|to|and|or)\s*)"
LISTED = re.compile(r"(?<![\w.=/^-])((?:" + NUMBER + r")(?:" + LIST_SEP + r"(?:" + NUMBER +
                    r"))+)\s?(" + UNIT_RE + r")(?![\w/])")
DERIVED = "<!-- derived -->"


def parse_number(s):
    """(value, decimals) of a printed number such as 6,592 or 0.17."""
    s = s.replace(",", "")
    decimals = len(s.split(".")[1]) if "." in s else 0
    return float(s), decimals


def collect_result_numbers(root):
    """Every number in docs/results/ (JSON values, and numbers inside any text), sorted."""
    values = set()
    text_number = re.compile(r"-?(?:" + NUMBER + r")(?:[eE][-+]?\d+)?")

    def walk(x):
        if isinstance(x, bool) or x is None:
            return
        if isinstance(x, (int, float)):
            values.add(abs(float(x)))
        elif isinstance(x, str):
            add_text(x)
        elif isinstance(x, list):
            for y in x:
                walk(y)
        elif isinstance(x, dict):
            for y in x.values():
                walk(y)

    def add_text(t):
        for m in text_number.finditer(t):
            try:
                values.add(abs(float(m.group(0).replace(",", ""))))
            except ValueError:
                pass

    for path in sorted(glob.glob(os.path.join(root, "docs", "results", "*"))):
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        if path.endswith(".json"):
            try:
                walk(json.loads(text))
                continue
            except ValueError:
                pass
        add_text(text)
    return sorted(values)


def found_in_results(value, decimals, unit, results):
    tol = 0.5 * 10.0 ** -decimals + 1e-9
    for factor in UNITS.get(unit, (1.0,)):
        # result * factor within tol of value  <=>  result within tol/factor of value/factor
        lo, hi = (value - tol) / factor, (value + tol) / factor
        i = bisect.bisect_left(results, lo)
        if i < len(results) and results[i] <= hi:
            return True
    return False


def table_units(header):
    """For a markdown table header row, the unit each column's header names (or None)."""
    cells = [c.strip() for c in header.strip().strip("|").split("|")]
    units = []
    for c in cells:
        m = re.search(UNIT_RE, c)
        units.append(m.group(0) if m else None)
    return units


def lesson_measurements(text):
    """(line number, printed number, unit, line) for each measured number of a lesson."""
    found = []
    lines = text.splitlines()
    skip_block = False
    in_code = False
    table_unit_cols = None
    for n, line in enumerate(lines, 1):
        stripped = line.strip()
        fence = stripped.startswith("```")
        if stripped == DERIVED:
            skip_block = True
            continue
        if fence:
            in_code = not in_code
            if not in_code and skip_block:  # the closing fence ends a skipped code block
                skip_block = False
                continue
        if skip_block:
            if not stripped and not in_code:
                skip_block = False
            continue
        if DERIVED in line:
            continue
        # Tables: a header row, then the separator row; numbers under a unit header count.
        if stripped.startswith("|"):
            if table_unit_cols is None and n < len(lines) and \
                    re.match(r"^\s*\|[\s:|-]+\|\s*$", lines[n] if n < len(lines) else ""):
                table_unit_cols = table_units(stripped)
            elif table_unit_cols is not None and not re.match(r"^\s*\|[\s:|-]+\|\s*$", line):
                cells = [c.strip() for c in stripped.strip("|").split("|")]
                for col, cell in enumerate(cells):
                    unit = table_unit_cols[col] if col < len(table_unit_cols) else None
                    m = re.fullmatch(r"\**(" + NUMBER + r")\**", cell)
                    if unit and m:
                        found.append((n, m.group(1), unit, line))
        else:
            table_unit_cols = None
        seen = set()
        for m in LISTED.finditer(line):
            for num in re.findall(NUMBER, m.group(1)):
                found.append((n, num, m.group(2), line))
                seen.add(num)
        for m in MEASURE.finditer(line):
            num, unit = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
            if num not in seen:
                found.append((n, num, unit, line))
    return found


def check_numbers(root, skip):
    results = collect_result_numbers(root)
    failures = []
    for path in sorted(glob.glob(os.path.join(root, "modules", "*", "*.md"))):
        rel = os.path.relpath(path, root)
        if rel in skip:
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for n, num, unit, line in lesson_measurements(text):
            value, decimals = parse_number(num)
            if not found_in_results(value, decimals, unit, results):
                failures.append(f"{rel}:{n}: {num} {unit} is in no file of docs/results/ "
                                f"(copy it from one, or mark arithmetic with {DERIVED}): "
                                f"{line.strip()[:120]}")
    return failures


# ---------------------------------------------------------------------------------------------
# Check 3: every embedded image exists (figures come from scripts/make_figures.py)

IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


def check_images(root):
    failures = []
    for rel in docs_to_check(root):
        path = os.path.join(root, rel)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                for target in IMAGE.findall(line):
                    if "://" in target:
                        continue
                    if not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(path),
                                                                        target))):
                        failures.append(f"{rel}:{n}: image {target} does not exist "
                                        "(python3 scripts/make_figures.py draws the figures)")
    return failures


# ---------------------------------------------------------------------------------------------


def read_allowlist(root):
    path = os.path.join(root, "tests", "docs_allowlist.txt")
    skip = set()
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                entry = line.split("#", 1)[0].strip()
                if entry:
                    skip.add(os.path.normpath(entry))
    return skip


def self_test():
    """The check on a small planted tree: what must fail fails, what must pass passes.
    Returns a list of problems (empty when the check behaves)."""
    import tempfile
    problems = []
    files = {
        "README.md": "Run scripts/gpu_session.sh; the FFMA count is the issued instructions.\n",
        "docs/results/r.json": '{"tflops": 377.9, "ms": 0.0057, "ns": [35809280]}',
        "docs/results/r.txt": "speedup 1.05\n",
        "modules/98_good/README.md": (
            "It runs at 378 TFLOP/s and 1.05x, one launch 5.7 µs (35.8 ms under ncu).\n"
            "How it was tuned: [docs/worklog/98_good.md](../../docs/worklog/98_good.md)\n"
            "Arithmetic: 4 · 8 = 32x less <!-- derived -->\n"
            "\n| N | median ms |\n|---|---:|\n| 512 | 0.0057 |\n"),
        "modules/98_good/k.cu": '// why: the sum needs the max first\nauto s = "session";\n',
        "modules/99_bad/README.md": (
            "Measured in the fifth session at 379 TFLOP/s.\n"
            "See the worklog for the variants.\n"
            "\n| N | median ms |\n|---|---:|\n| 512 | 9.25 |\n"),
        "solutions/99_bad/s.cu": "int x;  // faster than the previous version\n",
        "tests/t.py": 'def f():\n    """Rows as the third run wrote them."""\n',
    }
    # (file, line, a piece of the failure's reason, which the quoted line does not contain)
    want = {
        ("modules/99_bad/README.md", 1, "'session' ("), ("modules/99_bad/README.md", 1,
                                                         "a numbered run"),
        ("modules/99_bad/README.md", 1, "379 TFLOP/s is in no file"),
        ("modules/99_bad/README.md", 2, "'worklog' outside"),
        ("modules/99_bad/README.md", 6, "9.25 ms is in no file"),
        ("solutions/99_bad/s.cu", 1, "an earlier version"), ("tests/t.py", 2, "a numbered run"),
    }
    with tempfile.TemporaryDirectory() as root:
        for rel, text in files.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        got = check_history(root, set()) + check_numbers(root, set())
    for rel, line, word in sorted(want):
        if not any(g.startswith(f"{rel}:{line}:") and word in g for g in got):
            problems.append(f"self-test: expected a failure at {rel}:{line} ({word})")
    for g in got:
        if not any(g.startswith(f"{rel}:{line}:") for rel, line, _ in want):
            problems.append(f"self-test: unexpected failure: {g}")
    return problems


def main(argv=None):
    parser = argparse.ArgumentParser(description="the documentation check")
    parser.add_argument("--root", default=ROOT, help="the repository (default: this one)")
    args = parser.parse_args(argv)
    root = os.path.abspath(args.root)
    broken = self_test()
    if broken:
        print("\n".join(broken))
        print("test_docs: the check itself misbehaves on planted text")
        return 1
    skip = read_allowlist(root)
    missing = [p for p in sorted(skip) if not os.path.exists(os.path.join(root, p))]
    failures = [f"tests/docs_allowlist.txt: {p} does not exist" for p in missing]
    failures += check_history(root, skip)
    failures += check_numbers(root, skip)
    failures += check_images(root)
    for line in failures:
        print(line)
    if failures:
        print(f"test_docs: {len(failures)} failure(s)")
        return 1
    print(f"test_docs: OK ({len(skip)} file(s) on the allow-list)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
