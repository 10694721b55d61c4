# Promises: none
"""The README's Python examples run as written (one test per block), with
libpq's PG* variables pointing at the test server."""

import os
import pathlib
import re
import subprocess
import sys

import psycopg.conninfo
import pytest

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example(dsn, index, portable):
    code = BLOCKS[index]
    if "tooz" in code:
        pytest.importorskip("tooz")
    if portable and ("Semaphore" in code or "MultiLock" in code):
        pytest.skip("portable edition: no semaphores or multi-locks")
    if "Session" in code:
        with psycopg.connect(dsn) as conn:
            if conn.execute("SELECT to_regprocedure('dlock.open_session(interval,text)')"
                            " IS NULL").fetchone()[0]:
                pytest.skip("no sessions: to_regprocedure('dlock.open_session(interval,text)')"
                            " IS NULL on this server")
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    env = dict(os.environ)
    for key, var in (("host", "PGHOST"), ("port", "PGPORT"), ("user", "PGUSER"),
                     ("dbname", "PGDATABASE")):
        if key in params:
            env[var] = str(params[key])
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd="/", env=env, timeout=120)
    assert r.returncode == 0, f"README example {index + 1} failed:\n{code}\n{r.stdout}\n{r.stderr}"
    assert "Traceback" not in r.stderr
