"""Write fedbayes' package metadata (its entry points: the method registry) from pyproject.toml into a
folder on the Python path, for a machine that runs the source tree without installing it (a lent GPU
machine with no package index):  python benchmarks/source_metadata.py /tmp/site"""

import sys
import tomllib
from pathlib import Path

root = Path(__file__).resolve().parent.parent
project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
info = Path(sys.argv[1]) / f"{project['name']}-{project.get('version', '0')}.dist-info"
info.mkdir(parents=True, exist_ok=True)
(info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project.get('version', '0')}\n")
lines = []
for group, eps in project.get("entry-points", {}).items():
    lines += [f"[{group}]"] + [f"{k} = {v}" for k, v in eps.items()] + [""]
for key, section in (("scripts", "console_scripts"),):
    if project.get(key):
        lines += [f"[{section}]"] + [f"{k} = {v}" for k, v in project[key].items()] + [""]
(info / "entry_points.txt").write_text("\n".join(lines))
print(f"wrote {info}")
