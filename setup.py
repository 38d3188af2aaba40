"""Which packages and data a wheel of this project carries: the full distribution, or the
product only.

Why a ``setup.py``: pyproject.toml cannot state a choice, and the project builds two wheels
from one tree. ``DMN_WHEEL=product`` (set by ``image/build.py`` and the ``Dockerfile``)
builds the node and controller image's wheel: the driver (agent, controller, their library
layers and every command but ``dmn lab``) without the lab — ``dmn.lab`` and its command
``dmn.cli.lab`` — and without the data only the lab reads (the Helm chart and the examples,
``dmn/charts`` and ``dmn/examples``; the product's own data, the builtin programs and the
grammar, stays). Unset (or ``full``), the wheel is the whole project, from which ``dmn lab``
runs; an editable install (``make setup``) always sees the whole checkout.
"""

from __future__ import annotations

import os

from setuptools import find_packages, setup

PROFILES = ("full", "product")
LAB_PACKAGES = ["dmn.lab", "dmn.lab.*", "dmn.cli.lab", "dmn.cli.lab.*"]
PACKAGE_DATA = {
    "": ["*.lark", "*.yaml", "*.proto", "*.json", "py.typed"],
    "dmn.programs": ["**/*.yaml"],  # the builtin programs' folders are not packages
}
LAB_DATA = ["charts/**/*", "examples/**/*"]
"""What ``dmn lab`` reads through importlib.resources (dmn/charts, dmn/examples link there)."""

profile = os.environ.get("DMN_WHEEL", "full")
if profile not in PROFILES:
    raise SystemExit(f"DMN_WHEEL={profile!r}: expected one of {', '.join(PROFILES)}")
product_only = profile == "product"

setup(
    packages=find_packages(include=["dmn", "dmn.*"], exclude=LAB_PACKAGES if product_only else []),
    package_data={**PACKAGE_DATA, "dmn": [] if product_only else LAB_DATA},
    # setuptools copies a wheel's files through build/lib and never removes stale ones: the
    # product wheel is built apart, so a full build's lab cannot leak into it
    options={"build": {"build_base": "build/product"}} if product_only else {},
)
