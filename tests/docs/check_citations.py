#!/usr/bin/env python3
"""check_citations.py [--root DIR]: every markdown document the repository cites is in it.

Scans the text of every file of the repository (`git ls-files`, tracked and untracked but not
ignored; outside a git work tree, every file under DIR except build*/ and .git/) for names that
end in `.md` -- a path such as `docs/strategies.md` or a bare name such as `README.md` -- and
resolves each one against the repository root and against the citing file's own directory.
A citation that resolves to no file inside the repository is a failure, printed as

    path:line: cites '<name>.md', which is not in the repository

and the script exits 1 (0 when every citation resolves, 2 on a usage error).

What is not a citation:
- URLs (`https://.../README.md`): links to outside documents;
- paths built from variables or placeholders (`$OUT/table.md`, `<dir>/x.md`) and globs (`*.md`);
- the Markdown files hlp-analyze writes at run time (GENERATED_NAMES; analysis/report.cpp);
- binary files, and the data under datasets/ and the fuzzers' inputs (tests/fuzz/corpus/,
  tests/fuzz/regressions/ except their README.md files).
Standard library only.
"""
import argparse
import os
import re
import subprocess
import sys

# Markdown files that hlp-analyze writes into a report folder (analysis/report.cpp): a mention of
# `report/index.md` names an output, not a document of the repository.
GENERATED_NAMES = {"index.md", "table.md", "headline.md"}

# Folders (relative to the root, with a trailing slash) whose files are data, not prose.
DATA_DIRS = ("datasets/", "tests/fuzz/corpus/", "tests/fuzz/regressions/")

URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"`<>)\]]*")
# A run of path characters ending in `.md`, not inside a longer name (`x.mdx`, `a.md.in`).
CITATION = re.compile(r"(?<![A-Za-z0-9_.\-/])([A-Za-z0-9_.\-/]*[A-Za-z0-9_\-]\.md)"
                      r"(?![A-Za-z0-9_\-]|\.[A-Za-z0-9])")
# Characters that, right before a path, make it a variable or placeholder (`$OUT/`, `<dir>/`,
# `{name}/`, `%s/`) or a glob (`*/`), or a home-relative path (`~/`).
NOT_LITERAL_BEFORE = set("$<>{}%*~@")


def repository_files(root):
    """Relative paths (with '/') of the files to scan, sorted."""
    try:
        out = subprocess.run(
            ["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout
        top = subprocess.run(["git", "-C", root, "rev-parse", "--show-toplevel"], check=True,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout
        if os.path.realpath(top.decode().strip()) == os.path.realpath(root):
            names = [n for n in out.decode("utf-8", "surrogateescape").split("\0") if n]
            return sorted(n for n in names if os.path.isfile(os.path.join(root, n)))
    except (OSError, subprocess.CalledProcessError):
        pass
    names = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d != ".git" and not d.startswith("build")]
        else:
            dirnames[:] = [d for d in dirnames if d != ".git"]
        for f in filenames:
            rel = os.path.normpath(os.path.join(rel_dir, f)).replace(os.sep, "/")
            if os.path.isfile(os.path.join(root, rel)):
                names.append(rel)
    return sorted(names)


def is_data(rel):
    if not rel.startswith(DATA_DIRS):
        return False
    return not (rel.startswith("tests/fuzz/") and os.path.basename(rel) == "README.md")


def read_text(path):
    """The file's text, or None for a binary file."""
    with open(path, "rb") as f:
        data = f.read()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def resolves(root, rel_file, cited):
    """True when `cited`, read from the root or from the citing file's folder, is a file of the
    repository (inside the root)."""
    real_root = os.path.realpath(root)
    bases = [real_root, os.path.realpath(os.path.join(root, os.path.dirname(rel_file)))]
    for base in bases:
        target = os.path.realpath(os.path.join(base, cited))
        inside = target == real_root or target.startswith(real_root + os.sep)
        if inside and os.path.isfile(target):
            return True
    return False


def citations(text):
    """(line number, cited name) for every markdown citation in `text`."""
    for number, line in enumerate(text.splitlines(), 1):
        if ".md" not in line:
            continue
        line = URL.sub(lambda m: " " * len(m.group(0)), line)
        for m in CITATION.finditer(line):
            start = m.start(1)
            if start > 0 and line[start - 1] in NOT_LITERAL_BEFORE:
                continue
            cited = m.group(1)
            if os.path.basename(cited) in GENERATED_NAMES:
                continue
            if cited.startswith("/") and start > 0 and line[start - 1] == ":":
                continue  # the rest of a scheme-less link such as file:/x.md
            yield number, cited


def check(root):
    failures = []
    scanned = 0
    for rel in repository_files(root):
        if is_data(rel):
            continue
        text = read_text(os.path.join(root, rel))
        if text is None:
            continue
        scanned += 1
        for number, cited in citations(text):
            if not resolves(root, rel, cited):
                failures.append(f"{rel}:{number}: cites '{cited}', which is not in the repository")
    return scanned, failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."),
                        help="repository root (default: two folders above this script)")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    if not os.path.isdir(root):
        print(f"check_citations: --root '{root}' is not a folder", file=sys.stderr)
        return 2
    scanned, failures = check(root)
    for f in failures:
        print(f)
    print(f"check_citations: {scanned} files scanned, {len(failures)} citations of a markdown "
          f"document that is not in the repository")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
