"""The CPU tests run JAX on its CPU backend even on a GPU host (there, JAX would otherwise place
their reference computations on the GPU, with TF32 matmuls). The JAX test modules initialise
JAX while they are collected, so the choice is made here, when pytest enters this directory, and
undone once collection is over: the GPU tests start JAX in processes of their own, which must
see the environment as it was."""

from __future__ import annotations

import os

import pytest

_SAVED = os.environ.get("JAX_PLATFORMS")
os.environ["JAX_PLATFORMS"] = "cpu"


def pytest_collection_finish(session: pytest.Session) -> None:
    if _SAVED is None:
        os.environ.pop("JAX_PLATFORMS", None)
    else:
        os.environ["JAX_PLATFORMS"] = _SAVED
