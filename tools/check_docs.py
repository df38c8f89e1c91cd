#!/usr/bin/env python3
"""Checks that the user documents hold only figures and links the repository backs.

    tools/check_docs.py [--root DIR]

Documents: README.md, docs/*.md and models/demo/README.md under DIR (default: the repository
this script belongs to). Python 3 standard library only. For each document it checks:

(a) Results files exist. Every path `bench/results/NAME` a document mentions (in prose, code,
    tables or links; `../bench/results/NAME` too) names a file in DIR/bench/results; a name
    with `*` or `?` must match at least one file there. A bare results-file name such as
    `real-work-2026-12-06j-xeon-amx.txt` (anything ending in `-YYYY-MM-DD...txt`) must exist
    in bench/results as well.

(b) Table ratios match their results file. In every Markdown table (outside fenced code), a
    data row holding a ratio, a number with decimals followed by `x` or `×` (`1.52x`, `2.48×`;
    whole numbers such as `2x` are not ratios here), must have a results file to back it:
      1. the bench/results files the row itself names; else
      2. those named by the nearest earlier row of the same table that names any (a table of
         several machines names the file in the first row of each group); else
      3. the one bench/results file named by the paragraph right above the table (its caption;
         at most one blank line between them). A caption naming several files is ambiguous.
    Each ratio must appear in one of those files with the same digits, followed by `x` or `×`
    (optionally after a space), and not as the tail of a longer number: `1.42x` matches
    `| 1.42x |` or `(1.42x)`, not `11.42x` nor `1.420x`. A ratio with no file to back it is a
    problem too; rows whose citation names only files that do not exist are reported under
    (a) and their ratios left unchecked.

(c) Relative links resolve. Every Markdown link `[text](target)` outside code whose target is
    not a URL (`scheme:`) must name an existing file or directory, relative to the document;
    a `#fragment` into a Markdown file (or a bare `#fragment`, into the document itself) must
    be one of that file's heading anchors as GitHub makes them (lower case, punctuation other
    than `-` and `_` dropped, spaces to `-`, `-1`, `-2`, ... for repeated headings).

(d) Nothing points outside the repository: no document mentions `../shared`.

Prints each problem as `FILE:LINE: problem` and exits 1 if there is any; otherwise prints a
one-line summary and exits 0.
"""

import argparse
import fnmatch
import glob
import os
import re
import sys

RESULTS_DIR = os.path.join("bench", "results")
# A results path as documents write it; trailing sentence punctuation is trimmed below.
RESULTS_PATH = re.compile(r"bench/results/([A-Za-z0-9_.*?+-]+)")
# A bare results-file name (not preceded by a path separator or a word character).
RESULTS_NAME = re.compile(r"(?<![/\w.-])([a-z0-9]+(?:-[a-z0-9]+)*-\d{4}-\d{2}-\d{2}[a-z0-9-]*\.txt)\b")
RATIO = re.compile(r"(?<![\w.])(\d+\.\d+) ?[x×](?![\w])")
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
INLINE_CODE = re.compile(r"`[^`]*`")
FENCE = re.compile(r"^\s*(```|~~~)")
TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def documents(root):
    docs = ["README.md"] + sorted(
        os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "*.md")))
    docs.append(os.path.join("models", "demo", "README.md"))
    return [d for d in docs if os.path.isfile(os.path.join(root, d))]


def results_files(root):
    d = os.path.join(root, RESULTS_DIR)
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def cited(line, available):
    """The results files a line names: (existing names, problems for names that do not exist),
    each once, in order."""
    names, problems = [], []
    for m in RESULTS_PATH.finditer(line):
        name = m.group(1).rstrip(".,;:")
        if not name:
            continue
        if any(c in name for c in "*?"):
            matched = fnmatch.filter(available, name)
            if matched:
                names.extend(matched)
            else:
                problems.append(f"bench/results/{name} matches no file in bench/results")
        elif name in available:
            names.append(name)
        else:
            problems.append(f"bench/results/{name} does not exist")
    for m in RESULTS_NAME.finditer(line):
        name = m.group(1)
        # Already counted when written as a path.
        if f"bench/results/{name}" in line:
            continue
        if name in available:
            names.append(name)
        else:
            problems.append(f"results file {name} does not exist in bench/results")
    return list(dict.fromkeys(names)), list(dict.fromkeys(problems))


class Doc:
    def __init__(self, root, rel):
        self.root, self.rel = root, rel
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            self.lines = f.read().split("\n")
        # Which lines are inside fenced code blocks.
        self.in_code = []
        inside = False
        for line in self.lines:
            if FENCE.match(line):
                self.in_code.append(True)
                inside = not inside
            else:
                self.in_code.append(inside)


def anchors(path, cache={}):
    """GitHub's anchors for the headings of a Markdown file."""
    if path not in cache:
        seen, found = {}, set()
        inside = False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if FENCE.match(line):
                    inside = not inside
                    continue
                m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
                if inside or not m:
                    continue
                slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
                n = seen.get(slug, 0)
                seen[slug] = n + 1
                found.add(slug if n == 0 else f"{slug}-{n}")
        cache[path] = found
    return cache[path]


def is_table_line(line):
    return line.lstrip().startswith("|")


def check_tables(doc, available, file_text, report):
    """Rule (b). Returns the number of ratios checked."""
    checked = 0
    i, n = 0, len(doc.lines)
    while i < n:
        if doc.in_code[i] or not is_table_line(doc.lines[i]):
            i += 1
            continue
        start = i
        while i < n and not doc.in_code[i] and is_table_line(doc.lines[i]):
            i += 1
        rows = list(range(start, i))
        if len(rows) < 2 or not TABLE_SEPARATOR.match(doc.lines[rows[1]]):
            continue  # not a table (a line that merely starts with '|')
        # The caption: the paragraph right above (at most one blank line between).
        j = start - 1
        if j >= 0 and not doc.lines[j].strip():
            j -= 1
        caption = []
        while j >= 0 and doc.lines[j].strip() and not doc.in_code[j] and not is_table_line(doc.lines[j]):
            caption.append(doc.lines[j])
            j -= 1
        caption_files = sorted(set(cited("\n".join(caption), available)[0]))
        inherited, inherited_missing = [], False
        for r in rows[2:]:
            line = doc.lines[r]
            own, missing = cited(line, available)
            if own or missing:
                inherited, inherited_missing = own, not own
            ratios = [m.group(1) for m in RATIO.finditer(INLINE_CODE.sub("", line))]
            if not ratios:
                continue
            if (missing and not own) or (not own and not missing and inherited_missing):
                continue  # its rows cite only files that do not exist: reported under (a)
            files = own or inherited
            if not files:
                if len(caption_files) == 1:
                    files = caption_files
                elif len(caption_files) > 1:
                    report(doc.rel, r + 1, "ratio(s) " + ", ".join(r_ + "x" for r_ in ratios)
                           + " in a table whose caption names several results files ("
                           + ", ".join(caption_files) + ") and whose row names none")
                    continue
                else:
                    report(doc.rel, r + 1, "ratio(s) " + ", ".join(r_ + "x" for r_ in ratios)
                           + " in a table that cites no bench/results file (in the row, an "
                           "earlier row or the paragraph above)")
                    continue
            for ratio in ratios:
                checked += 1
                pattern = re.compile(r"(?<![\d.])" + re.escape(ratio) + r" ?[x×]")
                if not any(pattern.search(file_text(f)) for f in files):
                    report(doc.rel, r + 1, f"ratio {ratio}x is not in "
                           + " or ".join("bench/results/" + f for f in files))
    return checked


def check(root):
    problems = []

    def report(rel, line, what):
        problems.append(f"{rel}:{line}: {what}")

    available = results_files(root)
    cache = {}

    def file_text(name):
        if name not in cache:
            with open(os.path.join(root, RESULTS_DIR, name), encoding="utf-8", errors="replace") as f:
                cache[name] = f.read()
        return cache[name]

    docs = documents(root)
    ratios = links = 0
    for rel in docs:
        doc = Doc(root, rel)
        base = os.path.dirname(os.path.join(root, rel))
        for k, line in enumerate(doc.lines, 1):
            # (a) every results file named exists.
            for p in cited(line, available)[1]:
                report(rel, k, p)
            # (d) nothing outside the repository.
            if "../shared" in line:
                report(rel, k, "mentions ../shared (outside the repository)")
            # (c) relative links resolve.
            if doc.in_code[k - 1]:
                continue
            for m in LINK.finditer(INLINE_CODE.sub("", line)):
                target = m.group(1)
                if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", target):
                    continue
                links += 1
                path, _, fragment = target.partition("#")
                full = os.path.normpath(os.path.join(base, path)) if path else os.path.join(root, rel)
                if not os.path.exists(full):
                    report(rel, k, f"link to {target}: no such file or directory")
                elif fragment and full.endswith(".md") and fragment not in anchors(full):
                    report(rel, k, f"link to {target}: {os.path.relpath(full, root)} has no heading "
                           f"with the anchor #{fragment}")
        ratios += check_tables(doc, available, file_text, report)
    return docs, ratios, links, problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    ap.add_argument("--root", default=here, help="repository root (default: %(default)s)")
    args = ap.parse_args()
    if not os.path.isfile(os.path.join(args.root, "README.md")):
        print(f"check_docs: {args.root}: no README.md (not a repository root)")
        return 2
    docs, ratios, links, problems = check(args.root)
    for p in problems:
        print(p)
    if problems:
        print(f"check_docs: {len(problems)} problem(s) in {len(docs)} documents")
        return 1
    print(f"check_docs: {len(docs)} documents, {ratios} table ratios and {links} relative links "
          "checked, no problems")
    return 0


if __name__ == "__main__":
    sys.exit(main())
