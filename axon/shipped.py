"""The trained cost models Axon ships inside its package (`axon/models/`), found by name or path.

A checkout and an installed wheel resolve the same refs: `trn1`, `axon-costmodel-trn1`, and the
repository path `models/axon-costmodel-trn1.json` the README uses (`models/` at the repository
root links to `axon/models/`). This maps a ref to a file; it does not load the model.
"""

from __future__ import annotations

import os
from pathlib import Path

from axon.errors import StoreError

# beside the code, so that a wheel carries it as package data (pyproject.toml) and a checkout reads it in place
MODELS_DIR = Path(__file__).resolve().parent / "models"
PREFIX = "axon-costmodel-"


def shipped_cost_models() -> list[str]:
    """The hardware names that have a shipped model, e.g. ["trn1"]."""
    return sorted(p.stem.removeprefix(PREFIX) for p in MODELS_DIR.glob(f"{PREFIX}*.json"))


def cost_model_ref(ref: str | None) -> str | None:
    """`ref` with a shipped model's name or repository path replaced by the file's path.

    An existing file, a registry ref (`models:/...`) and None pass unchanged; so does any other path
    (the loader names it when it is missing). A bare name with no shipped model is a StoreError.

    >>> Path(cost_model_ref("trn1")).name
    'axon-costmodel-trn1.json'
    >>> same = [Path(cost_model_ref(r)).resolve() for r in ("models/axon-costmodel-trn1.json", "axon-costmodel-trn1")]
    >>> same[0] == same[1]
    True
    """
    if not ref or ref.startswith("models:/"):
        return ref
    if os.path.isfile(os.path.expanduser(ref)):  # ~/m.json, as a shell that did not expand it passes it
        return os.path.expanduser(ref)
    path = Path(ref)
    if path.parts == ("models", path.name) and (MODELS_DIR / path.name).is_file():
        return str(MODELS_DIR / path.name)  # the repository path, outside a checkout
    if len(path.parts) != 1 or path.suffix:
        return ref
    name = ref.removeprefix(PREFIX)
    if name not in shipped_cost_models():
        raise StoreError(
            f"cost model {ref} not found (a file, models:/NAME@ALIAS, or shipped: "
            f"{', '.join(shipped_cost_models()) or 'none'})"
        )
    return str(MODELS_DIR / f"{PREFIX}{name}.json")
