#!/usr/bin/env python3
"""Identical-line share of each PostgreSQL/SQLite file pair under src/store.

Normalises placeholders (`?N` and bare `?` -> `$N`) and the backends' type and module names,
then counts the non-blank lines of the pair that occur in both (as a multiset), over the
non-blank lines of both files. Run from the repository root: python3 scripts/store-overlap.py
"""
import collections
import os
import re
import sys

ROOT = "src/store"
PAIRS = [
    ("postgres.rs", "sqlite.rs"),
    ("postgres/admin.rs", "sqlite/admin.rs"),
    ("postgres/retention.rs", "sqlite/retention.rs"),
    ("postgres/ingest.rs", "sqlite/ingest.rs"),
    ("postgres/missing_jobs.rs", "sqlite/missing_jobs.rs"),
    ("postgres/queue.rs", "sqlite/queue.rs"),
]
NAMES = [
    (r"\bPgStore\b|\bSqliteStore\b", "Store"),
    (r"\bPgRow\b|\bSqliteRow\b", "Row"),
    (r"\bPgPool\b|\bSqlitePool\b", "Pool"),
    (r"\bPgConnection\b|\bSqliteConnection\b", "Connection"),
    (r"\bPgArguments\b|\bSqliteArguments(<'q>)?", "Arguments"),
    (r"\bPostgres\b|\bSqlite\b", "Db"),
    (r"\bpostgres\b|\bsqlite\b", "db"),
    (r"PostgreSQL|SQLite", "DB"),
]


def normalise(line):
    line = re.sub(r"\?(\d+)", r"$\1", line.strip())
    for pattern, name in NAMES:
        line = re.sub(pattern, name, line)
    return line


def lines(path):
    with open(path) as f:
        return [normalise(l) for l in f if l.strip()]


def main():
    total_same = total = 0
    for pg, lite in PAIRS:
        a, b = os.path.join(ROOT, pg), os.path.join(ROOT, lite)
        if not (os.path.exists(a) and os.path.exists(b)):
            print(f"{pg} / {lite}: not a pair (one side absent)")
            continue
        la, lb = lines(a), lines(b)
        common = sum((collections.Counter(la) & collections.Counter(lb)).values())
        same, n = 2 * common, len(la) + len(lb)
        total_same += same
        total += n
        print(f"{pg} / {lite}: {same} of {n} non-blank lines identical ({100 * same / n:.0f} %)")
    if total:
        print(f"all pairs: {total_same} of {total} ({100 * total_same / total:.0f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
