"""Package layout: the repository's `cli/`, `pipeline/` and `configs/` install as `specq.cli`,
`specq.pipeline` and `specq.configs` (metadata lives in pyproject.toml)."""

from setuptools import find_packages, setup

ROOTS = {"specq.cli": "cli", "specq.pipeline": "pipeline", "specq.configs": "configs"}

packages = []
for name, folder in ROOTS.items():
    packages.append(name)
    packages.extend(f"{name}.{sub}" for sub in find_packages(folder))

setup(
    package_dir=ROOTS,
    packages=packages,
    package_data={
        "": ["*.toml", "*.jsonl", "*.json", "*.txt"],
        "specq.pipeline.workload": ["suites/*.jsonl"],
        "specq.pipeline.engines.lmdeploy_compat": ["*.diff", "boot/*.py"],
    },
)
