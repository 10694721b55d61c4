#!/usr/bin/env python3
"""Write dlock's synchronous API (src/dlock/_sync.py, _leased_sync.py) from
its asyncio one (aio.py, _leased_aio.py), as psycopg's
tools/async_to_sync.py does for psycopg.

    python3 tools/async_to_sync.py             # rewrite them in src/dlock
    python3 tools/async_to_sync.py --check     # exit 1 (with a diff) if stale
    python3 tools/async_to_sync.py --dir DIR   # DIR/_sync.py ... instead

Standard library only; comments and layout are kept (tokens are edited in
place, not unparsed).  What it does to aio.py:
- ``if True:  # ASYNC`` ... ``else:`` ...: the else branch only (none
  without one), as psycopg's tool does;
- a line ending in ``# ASYNC`` is dropped (an import, a parameter);
- ``async`` and ``await`` go; names are renamed (NAMES); a few phrases of
  docstrings change (PHRASES); the module docstring is SYNC_DOC;
- an f-string is edited as a whole, text and fields alike (PHRASES, then
  NAMES), so that every Python writes the same (3.12 tokenizes it apart).
What differs beyond that lives in _flavour_aio.py / _flavour_sync.py."""

from __future__ import annotations

import argparse
import ast
import difflib
import io
import re
import sys
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "dlock"

HEADER = ("# generated from {source} by tools/async_to_sync.py; do not edit\n"
          "# (change {source}, or _flavour_sync.py, and run the tool again)\n")

#: Each source (in PACKAGE), what it becomes, and that file's docstring.
FILES = {"aio.py": "_sync.py", "_leased_aio.py": "_leased_sync.py"}
SYNC_DOCS = {}
SYNC_DOCS["aio.py"] = '''"""The synchronous API: Lock, Semaphore, MultiLock, Election, leader()
and observe(), generated from aio.py (the asyncio API).

Threads: each held Lock, Semaphore or MultiLock (or leading Election) has
one renewal thread and one deadline timer.  Its state (fences, lost, the
renewal connection) is guarded by ``self._mutex``; callbacks run outside
it.  A MultiLock's holdings are renewed and released together, in one
statement; the loss of any of them is the loss of the whole.

Forks: a holding belongs to the process that acquired it.  In a child
forked while it is held (os.fork, multiprocessing's fork start method)
it is not held: leaving the block there sends nothing to the server, and
the parent's connection is left alone (see _leased_sync._after_fork)."""'''
SYNC_DOCS["_leased_aio.py"] = '''"""What dlock's Lock, Semaphore, MultiLock and Election share (_Leased):
connections, acquisition, renewal, loss, release, forks; generated from
_leased_aio.py."""'''

#: Names of the asyncio API and their synchronous counterparts.
NAMES = {
    "AsyncConnection": "Connection",
    "AsyncIterator": "Iterator",
    "asynccontextmanager": "contextmanager",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "_flavour_aio": "_flavour_sync",
    "_leased_aio": "_leased_sync",
}

#: Phrases of strings (docstrings, messages) and their synchronous forms.
PHRASES = [
    ("``async with dlock.aio.", "``with dlock."),
    ("await e.campaign", "e.campaign"),
]

_ASYNC_LINE = re.compile(r"#\s*ASYNC\s*$")


def _async_if(tree: ast.AST, lines: "list[str]") -> "ast.If | None":
    """The last ``if True:  # ASYNC`` statement of TREE (in source order)."""
    found = None
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Constant) \
                and node.test.value is True and _ASYNC_LINE.search(lines[node.lineno - 1]):
            if found is None or node.lineno > found.lineno:
                found = node
    return found


def drop_async_blocks(text: str) -> str:
    """Replace each ``if True:  # ASYNC`` statement by its else branch,
    dedented to the if's level."""
    while True:
        lines = text.splitlines(keepends=True)
        node = _async_if(ast.parse(text), lines)
        if node is None:
            return text
        first, last = node.lineno - 1, node.end_lineno
        keep: "list[str]" = []
        if node.orelse:
            else_at = max(i for i in range(node.body[-1].end_lineno, node.orelse[0].lineno)
                          if re.match(r"\s*else\s*:", lines[i]))
            indent = len(lines[first]) - len(lines[first].lstrip())
            body = lines[else_at + 1:node.orelse[-1].end_lineno]
            step = len(lines[node.orelse[0].lineno - 1]) - \
                len(lines[node.orelse[0].lineno - 1].lstrip()) - indent
            for line in body:
                cut = len(line) - len(line.lstrip(" "))
                keep.append(line[min(step, cut):] if line.strip() else line)
        text = "".join(lines[:first] + keep + lines[last:])


def drop_async_lines(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True)
                   if not _ASYNC_LINE.search(line.rstrip("\n")))


def _phrases(s: str) -> str:
    for a, b in PHRASES:
        s = s.replace(a, b)
    return s


_NAMES_RE = re.compile(r"\b(" + "|".join(map(re.escape, NAMES)) + r")\b")
#: Python 3.12 on: an f-string is FSTRING_START ... FSTRING_END, with the
#: tokens of its fields inside; up to 3.11 it is one STRING.
_FSTRING_START = getattr(tokenize, "FSTRING_START", None)
_FSTRING_END = getattr(tokenize, "FSTRING_END", None)


def _fstring(s: str) -> str:
    """An f-string's source, edited as a whole (the same on every Python):
    PHRASES changed and NAMES renamed, in its text and its fields alike."""
    return _NAMES_RE.sub(lambda m: NAMES[m.group(1)], _phrases(s))


def _is_fstring(tok: tokenize.TokenInfo) -> bool:
    prefix = tok.string[:len(tok.string) - len(tok.string.lstrip("rRbBuUfF"))]
    return tok.type == tokenize.STRING and "f" in prefix.lower()


def edit_tokens(text: str, doc: str) -> str:
    """Drop ``async``/``await``, rename NAMES, change PHRASES, replace the
    module docstring; continuation lines aligned with a bracket whose line
    got shorter before it move left with it."""
    lines = text.splitlines(keepends=True)
    at = [0]
    for line in lines:
        at.append(at[-1] + len(line))

    def offset(pos: "tuple[int, int]") -> int:
        return at[pos[0] - 1] + pos[1]

    toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
    edits: "list[tuple[int, int, str]]" = []            # (start, end, new), offsets
    shorter: "dict[int, list[tuple[int, int]]]" = {}    # row: (col, chars removed)

    def edit(tok: tokenize.TokenInfo, end: "tuple[int, int]", new: str) -> None:
        edits.append((offset(tok.start), offset(end), new))
        if tok.start[0] == end[0]:
            shorter.setdefault(tok.start[0], []).append(
                (tok.start[1], end[1] - tok.start[1] - len(new)))

    docstring = True
    inside = 0      # how deep in an f-string's tokens (3.12 on)
    for i, tok in enumerate(toks):
        if inside:
            inside += (tok.type == _FSTRING_START) - (tok.type == _FSTRING_END)
            continue
        if tok.type == _FSTRING_START:
            inside, j = 1, i
            while inside:
                j += 1
                inside += (toks[j].type == _FSTRING_START) - (toks[j].type == _FSTRING_END)
            inside = 1
            whole = text[offset(tok.start):offset(toks[j].end)]
            if _fstring(whole) != whole:
                edit(tok, toks[j].end, _fstring(whole))
        elif _is_fstring(tok) and not docstring:
            if _fstring(tok.string) != tok.string:
                edit(tok, tok.end, _fstring(tok.string))
        elif tok.type == tokenize.STRING and docstring:
            edit(tok, tok.end, doc)
        elif tok.type == tokenize.NAME and tok.string in ("async", "await"):
            nxt = toks[i + 1]
            if tok.string == "await" or nxt.string in ("def", "with", "for"):
                edit(tok, nxt.start if nxt.start[0] == tok.start[0] else tok.end, "")
        elif tok.type == tokenize.NAME and tok.string in NAMES:
            edit(tok, tok.end, NAMES[tok.string])
        elif tok.type == tokenize.STRING and _phrases(tok.string) != tok.string:
            edit(tok, tok.end, _phrases(tok.string))
        if tok.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE,
                            tokenize.ENCODING):
            docstring = False

    # Continuation lines aligned one past an opening bracket follow it.
    shift: "dict[int, int]" = {}
    stack: "list[tuple[int, int]]" = []      # (column of the bracket, its shift)
    prev_row = 0
    for tok in toks:
        row, col = tok.start
        if row != prev_row and stack and tok.type not in (tokenize.NL, tokenize.NEWLINE):
            bcol, bshift = stack[-1]
            if col == bcol + 1 and bshift and not lines[row - 1][:max(0, bshift)].strip():
                shift[row] = bshift
                edits.append((at[row - 1], at[row - 1] + max(0, bshift), " " * -bshift))
        if tok.type not in (tokenize.NL, tokenize.NEWLINE):
            prev_row = tok.end[0]
        if tok.type == tokenize.OP and tok.string in "([{":
            before = sum(n for c, n in shorter.get(row, []) if c < col)
            stack.append((col, shift.get(row, 0) + before))
        elif tok.type == tokenize.OP and tok.string in ")]}":
            stack.pop()

    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def convert(source: str, text: str) -> str:
    """The synchronous module written from TEXT, the asyncio module SOURCE."""
    text = drop_async_blocks(text)
    text = drop_async_lines(text)
    text = edit_tokens(text, SYNC_DOCS[source])
    return HEADER.format(source=source) + text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="compare with the existing files; exit 1 (and a diff) if any differs")
    ap.add_argument("--dir", type=Path, default=PACKAGE,
                    help="where the generated files are (default: src/dlock)")
    opt = ap.parse_args()
    stale = 0
    for source, target in FILES.items():
        new = convert(source, (PACKAGE / source).read_text())
        path = opt.dir / target
        compile(new, str(path), "exec")
        if not opt.check:
            path.write_text(new)
            continue
        old = path.read_text() if path.exists() else ""
        if old != new:
            stale += 1
            sys.stdout.writelines(difflib.unified_diff(
                old.splitlines(keepends=True), new.splitlines(keepends=True),
                str(path), f"generated from {source}"))
            print(f"{path} is stale: run tools/async_to_sync.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
