"""``sbrs.digest``: the same SHA-256 as hashlib, without importing hashlib where it is not imported yet."""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st

from sbrs import digest


@given(st.binary(max_size=5000), st.integers(min_value=1, max_value=97))
def test_digests_equal_hashlibs(data: bytes, chunk: int) -> None:
    assert digest.sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()
    assert digest.file_sha256(io.BytesIO(data), chunk) == hashlib.sha256(data).hexdigest()


def test_the_builtin_is_used_where_hashlib_is_not_imported() -> None:
    code = ("import sys; from sbrs import digest; h = digest.sha256(b'abc').hexdigest(); "
            "print(h, 'hashlib' in sys.modules, '_hashlib' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == [hashlib.sha256(b"abc").hexdigest(), "False", "False"]
