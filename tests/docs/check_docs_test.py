#!/usr/bin/env python3
"""tools/check_docs.py on the repository's own documents, which must pass, and on small broken
copies written to $TEST_TMPDIR, each of which must be reported with its file and line: a
results file that does not exist (as a path and as a bare name), a ratio its cited file does
not hold, a ratio in a table that cites no file, a caption naming two files, a dead relative
link, a link to a heading that does not exist, and a mention of ../shared. A good copy must
pass, so that the broken ones fail for the reason given and not for another.

The documents link to files anywhere in the repository and cite bench/results, so the checker
runs on the source tree itself, found through the runfile README.md, a link into it (the test
is tagged local and external: it runs outside the sandbox and is never cached). Run directly,
the test checks the tree it is in."""

import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RUNFILES = os.path.dirname(os.path.dirname(HERE))
REPO = os.path.dirname(os.path.realpath(os.path.join(RUNFILES, "README.md")))
CHECKER = os.path.join(REPO, "tools", "check_docs.py")

failures = 0


def check(ok, what, detail=""):
    global failures
    print(("ok: " if ok else "FAIL: ") + what + ("" if ok else "\n  " + detail.replace("\n", "\n  ")))
    failures += not ok


def run(root):
    r = subprocess.run([sys.executable, CHECKER, "--root", root], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


# The real documents.
rc, out = run(REPO)
print(f"repository: {REPO}")
check(os.path.isfile(CHECKER) and os.path.isdir(os.path.join(REPO, "bench", "results")),
      "the runfile README.md leads to the source tree (tools/check_docs.py and bench/results/ there)", REPO)
check(rc == 0 and "no problems" in out, "README.md, docs/*.md and models/demo/README.md pass", out)

# A small repository of our own.
GOOD_RESULTS = """# bench/run_real_bench.sh data (a made-up table)
| threads | engine | tnmt speed vs this |
|---|---|---|
| 1 | tnmt |  |
| 1 | ct2 | 1.42x |
| 2 | ct2 | (2.85x) |
"""
GOOD_README = """# demo

See [the performance page](docs/perf.md#numbers) and [the notes](docs/notes.md).

## Numbers

The run ([bench/results/run-2026-01-01-a.txt](bench/results/run-2026-01-01-a.txt)):

| threads | tnmt speed |
|---|---|
| 1 | 1.42x |
| 2 | 2.85× |
"""
GOOD_PERF = """# Numbers

| machine | threads | ratio |
|---|---|---|
| A (`bench/results/run-2026-01-01-a.txt`) | 1 | 1.42x |
| | 2 | 2.85x |
| B (run-2026-01-02-b.txt) | 1 | 1.10x |

Back to the [README](../README.md#numbers).
"""


def make_repo(name, readme=GOOD_README, perf=GOOD_PERF):
    root = os.path.join(os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp(), name)
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(os.path.join(root, "docs"))
    os.makedirs(os.path.join(root, "bench", "results"))
    os.makedirs(os.path.join(root, "models", "demo"))
    for rel, text in (("README.md", readme), ("docs/perf.md", perf), ("docs/notes.md", "# Notes\n"),
                      ("models/demo/README.md", "# Demo model\n"),
                      ("bench/results/run-2026-01-01-a.txt", GOOD_RESULTS),
                      ("bench/results/run-2026-01-02-b.txt", "| 1 | ct2 | 1.10x |\n")):
        with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
            f.write(text)
    return root


rc, out = run(make_repo("good"))
check(rc == 0, "a good copy passes (ratios with x and ×, row, inherited-row and caption citations, "
      "links with anchors)", out)


def broken(what, where, readme=GOOD_README, perf=GOOD_PERF):
    rc, out = run(make_repo(what.replace(" ", "_")[:40], readme, perf))
    check(rc == 1 and where in out, f"reported: {what} ({where})", f"exit {rc}:\n{out}")


# Each: what breaks, the problem line the checker must print, the document (README.md or
# docs/perf.md) and the text replaced in the good copy.
BROKEN = [
    ("a cited results file that does not exist",
     "README.md:7: bench/results/run-2026-01-09-x.txt does not exist",
     "readme", "run-2026-01-01-a.txt](bench/results/run-2026-01-01-a.txt)", "run-2026-01-09-x.txt](bench/results/run-2026-01-09-x.txt)"),
    ("a bare results-file name that does not exist",
     "docs/perf.md:7: results file run-2026-01-03-c.txt does not exist",
     "perf", "run-2026-01-02-b.txt", "run-2026-01-03-c.txt"),
    ("a ratio its cited file does not hold",
     "README.md:12: ratio 2.86x is not in bench/results/run-2026-01-01-a.txt",
     "readme", "2.85×", "2.86×"),
    ("a ratio that only ends like the file's",
     "docs/perf.md:5: ratio 1.4x is not in",
     "perf", "| 1.42x |", "| 1.4x |"),
    ("a ratio inherited from an earlier row, wrong",
     "docs/perf.md:6: ratio 2.58x is not in bench/results/run-2026-01-01-a.txt",
     "perf", "2.85x", "2.58x"),
    ("a ratio in a table that cites no file",
     "README.md:11: ratio(s) 1.42x in a table that cites no bench/results file",
     "readme", "The run ([bench/results/run-2026-01-01-a.txt](bench/results/run-2026-01-01-a.txt)):", "The run:"),
    ("a caption that names two files",
     "README.md:11: ratio(s) 1.42x in a table whose caption names several",
     "readme", "The run (", "The runs (bench/results/run-2026-01-02-b.txt, "),
    ("a dead relative link",
     "README.md:3: link to docs/nope.md: no such file or directory",
     "readme", "docs/notes.md", "docs/nope.md"),
    ("a link to a heading that does not exist",
     "docs/perf.md:9: link to ../README.md#figures: README.md has no heading",
     "perf", "#numbers", "#figures"),
    ("a mention of ../shared",
     "README.md:3: mentions ../shared",
     "readme", "[the notes](docs/notes.md)", "[the notes](docs/notes.md) (data in ../shared/data)"),
]
for what, where, doc, old, new in BROKEN:
    broken(what, where, **{doc: (GOOD_README if doc == "readme" else GOOD_PERF).replace(old, new)})

print(f"{failures} failure(s)" if failures else "all checks passed")
sys.exit(1 if failures else 0)
