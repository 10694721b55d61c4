# Promises: P16
"""tools/async_to_sync.py writes the same synchronous code on every
Python it runs on: an f-string is edited as a whole (names renamed,
phrases changed) whether the tokenizer gives it as one STRING (up to
3.11) or as FSTRING_* tokens with the names inside (3.12 on)."""

import importlib.util
from pathlib import Path

TOOL = Path(__file__).resolve().parent.parent / "tools" / "async_to_sync.py"


def tool():
    spec = importlib.util.spec_from_file_location("async_to_sync_under_test", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.SYNC_DOCS["snippet.py"] = '"""The sync snippet."""'
    return mod


SOURCE = '''"""The async snippet."""
async def name(conn: AsyncConnection) -> str:
    await conn.close()
    return f"{AsyncConnection.__name__}: ``async with dlock.aio.Lock``"
'''


def test_fstrings_are_edited_alike_on_every_python():
    out = tool().convert("snippet.py", SOURCE)
    body = out.split('"""The sync snippet."""', 1)[1]
    assert body == '''
def name(conn: Connection) -> str:
    conn.close()
    return f"{Connection.__name__}: ``with dlock.Lock``"
''', out
