"""Test-session set-up.

With `LCM_EQX_TYPECHECK=1`, every annotated function and module of lcm_eqx is checked at
run time by jaxtyping + beartype (shapes and dtypes included). `tests/test_typecheck.py`
runs the main flows this way in a subprocess; the rest of the suite runs unchecked so
that bad-input tests see lcm_eqx's own errors rather than type-check failures.
"""

import os

if os.environ.get("LCM_EQX_TYPECHECK") == "1":
    from jaxtyping import install_import_hook

    install_import_hook("lcm_eqx", "beartype.beartype")
