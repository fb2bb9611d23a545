"""Packaging that pyproject.toml cannot say: conf/ (the Hydra configs, kept at the repository's
top level) is mapped into the package as `attnlab.conf`, so a wheel carries its configs."""

from setuptools import find_namespace_packages, setup

setup(
    packages=[*find_namespace_packages("src", include=["attnlab", "attnlab.*"]), "attnlab.conf"],
    package_dir={"": "src", "attnlab.conf": "conf"},
    package_data={"attnlab.conf": ["**/*.yaml"]},
)
