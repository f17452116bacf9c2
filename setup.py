"""Package discovery for the ``hopsearch.*`` namespace (the rest of the configuration is in pyproject.toml).

The code lives in top-level folders (``service/``, ``loaders/``, ``cli/``, ``es_mappings/``) that install
as ``hopsearch.<folder>``. pyproject.toml's ``packages.find`` cannot add that prefix, so the packages are
found here: every folder below them (namespace packages included, e.g. ``loaders/data``) is a package, and
a new subpackage ships without anyone editing a list.
"""

from setuptools import find_namespace_packages, setup

FOLDERS = ("service", "loaders", "cli", "es_mappings")


def packages() -> list[str]:
    found: list[str] = ["hopsearch"]  # hopsearch/__init__.py: the curated public names
    for folder in FOLDERS:
        found.append(f"hopsearch.{folder}")
        found += [f"hopsearch.{folder}.{sub}" for sub in find_namespace_packages(folder, exclude=["*__pycache__*"])]
    return found


setup(
    packages=packages(),
    package_dir={"hopsearch": "hopsearch", **{f"hopsearch.{folder}": folder for folder in FOLDERS}},
)
