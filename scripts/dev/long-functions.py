#!/usr/bin/env python3
"""Lists the product functions longer than a limit (100 lines by default), longest first.

Product code is every tracked .rs file except tests: the tests/ and fuzz/ folders, files named
tests.rs, benches and the items under #[cfg(test)]. A function's length runs from its `fn` line to
its closing brace, comments and blank lines included. Exits 1 when any function is over the limit,
so scripts/test.sh can keep it at none.

Usage: scripts/dev/long-functions.py [--limit N] [--commit REV]
  --commit REV reads the files as they were at REV (for a before/after count).
"""
import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FN = re.compile(r'^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)')
STRING = re.compile(r'"(\\.|[^"\\])*"')
# Character literals such as '{' (not lifetimes such as 'a): their braces are not code's.
CHAR = re.compile(r"'(\\.|[^'\\])'")


def git(*args):
    return subprocess.run(['git', *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def product_files(commit):
    names = git('ls-tree', '-r', '--name-only', commit) if commit else git('ls-files', '*.rs')
    for name in names.split():
        if not name.endswith('.rs') or name.startswith(('tests/', 'fuzz/')):
            continue
        if '/tests/' in name or '/benches/' in name or name.endswith('tests.rs'):
            continue
        yield name


def braces(line):
    code = CHAR.sub("' '", STRING.sub('""', line)).split('//')[0]
    return code.count('{') - code.count('}'), '{' in code, ';' in code


def item_end(lines, start):
    """The index of the line that closes the item starting at `start`, and whether it has a body
    (a signature ending in `;` has none and ends where it is)."""
    depth, opened = 0, False
    for i in range(start, len(lines)):
        delta, has_open, has_semicolon = braces(lines[i])
        depth += delta
        opened = opened or has_open
        if not opened and has_semicolon:
            return i, False
        if opened and depth <= 0:
            return i, True
    return len(lines) - 1, opened


def long_functions(text, limit):
    lines = text.split('\n')
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if stripped.startswith(('#[cfg(test)]', '#[cfg(all(test')):
            i = item_end(lines, i + 1)[0] + 1
            continue
        match = FN.match(lines[i])
        if match:
            end, has_body = item_end(lines, i)
            if has_body and end - i + 1 > limit:
                yield end - i + 1, i + 1, match.group(6)
        i += 1


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--limit', type=int, default=100)
    parser.add_argument('--commit')
    args = parser.parse_args()
    found = []
    for name in product_files(args.commit):
        text = git('show', f'{args.commit}:{name}') if args.commit else (ROOT / name).read_text()
        found += [(length, name, line, fn) for length, line, fn in long_functions(text, args.limit)]
    for length, name, line, fn in sorted(found, reverse=True):
        print(f'{length:5} lines  {name}:{line}  {fn}')
    print(f'{len(found)} product functions over {args.limit} lines')
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main())
