"""`snakemake -n` in a fresh clone plans without fetching: no dataset is downloaded or looked up, nothing is
written under data/ or work/data/, and no network error or download hint is printed (planning only reads
the data step's records, fedbayes.workflow.plan.availability)."""

import os
import re
import subprocess

from dagutil import BIN, copy_repo

FETCHING = re.compile(r"download|urlopen|HTTP Error|Network is unreachable|Connection refused|name resolution|"
                      r"Traceback|Errno", re.I)


def test_a_dry_run_in_a_fresh_clone_fetches_nothing(repo, tmp_path):
    d = copy_repo(repo, tmp_path / "clone", scale="paper")
    before = sorted(p.relative_to(d) for p in d.rglob("*"))
    env = {k: v for k, v in os.environ.items() if k != "FEDBAYES_OFFLINE"}   # as a user's shell
    env.update(PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=str(d / "src"))
    r = subprocess.run(["snakemake", "-n", "--cores", "1", "reports/README.md", "reports/metrics"], cwd=d, env=env,
                       capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "data" in out     # the data step is planned (a checkpoint), not run
    assert not FETCHING.search(out), FETCHING.search(out).group(0)
    made = [p for p in sorted(p.relative_to(d) for p in d.rglob("*")) if p not in before]
    assert not [p for p in made if p.parts[0] == "data" or p.parts[:2] == ("work", "data")], made
