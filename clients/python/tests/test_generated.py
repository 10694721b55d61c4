"""The synchronous API (src/dlock/_sync.py) is generated from the asyncio
one (src/dlock/aio.py) by tools/async_to_sync.py: the file in the tree
must be exactly what the tool writes now.  Fails after a hand edit of
_sync.py, or a change of aio.py without running the tool."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "async_to_sync.py"
SYNC = ROOT / "src" / "dlock" / "_sync.py"


def test_sync_module_is_the_generated_one(tmp_path):
    fresh = tmp_path / "_sync.py"
    subprocess.run([sys.executable, str(TOOL), "-o", str(fresh)], check=True)
    assert SYNC.read_text().startswith(
        "# generated from aio.py by tools/async_to_sync.py; do not edit\n")
    assert SYNC.read_text() == fresh.read_text(), \
        f"{SYNC} is stale: run python3 {TOOL} (and edit aio.py, not _sync.py)"


def test_check_mode_says_the_same(tmp_path):
    """--check (for CI and for hand use) agrees: exit 0 on the tree's file,
    1 with a diff on a file that differs from it."""
    assert subprocess.run([sys.executable, str(TOOL), "--check"]).returncode == 0
    edited = tmp_path / "_sync.py"
    edited.write_text(SYNC.read_text().replace("def _take(", "def _take_by_hand(", 1))
    run = subprocess.run([sys.executable, str(TOOL), "--check", "-o", str(edited)],
                         capture_output=True, text=True)
    assert run.returncode == 1 and "_take_by_hand" in run.stdout, run
