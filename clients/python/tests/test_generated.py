# Promises: none
"""The synchronous API (src/dlock/_sync.py and _leased_sync.py) is
generated from the asyncio one (aio.py, _leased_aio.py) by
tools/async_to_sync.py: the files in the tree must be exactly what the
tool writes now.  Fails after a hand edit of a generated file, or a change
of its source without running the tool."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "async_to_sync.py"
PACKAGE = ROOT / "src" / "dlock"
GENERATED = {"_sync.py": "aio.py", "_leased_sync.py": "_leased_aio.py"}


def test_sync_modules_are_the_generated_ones(tmp_path):
    subprocess.run([sys.executable, str(TOOL), "--dir", str(tmp_path)], check=True)
    for name, source in GENERATED.items():
        text = (PACKAGE / name).read_text()
        assert text.startswith(f"# generated from {source} by tools/async_to_sync.py;"
                               " do not edit\n"), name
        assert text == (tmp_path / name).read_text(), \
            f"{PACKAGE / name} is stale: run python3 {TOOL} (and edit {source}, not {name})"


def test_check_mode_says_the_same(tmp_path):
    """--check (for CI and for hand use) agrees: exit 0 on the tree's files,
    1 with a diff when one of them was edited by hand."""
    assert subprocess.run([sys.executable, str(TOOL), "--check"]).returncode == 0
    for name in GENERATED:
        shutil.copy(PACKAGE / name, tmp_path / name)
    edited = tmp_path / "_leased_sync.py"
    edited.write_text(edited.read_text().replace("def _take(", "def _take_by_hand(", 1))
    run = subprocess.run([sys.executable, str(TOOL), "--check", "--dir", str(tmp_path)],
                         capture_output=True, text=True)
    assert run.returncode == 1 and "_take_by_hand" in run.stdout, run
