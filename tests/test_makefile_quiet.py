"""Every make target that builds through Snakemake prints Snakemake's summary only: its snakemake line
ends with $(QUIET) (one line per job would be thousands of lines for `make smoke`)."""

import re


def _recipes(repo) -> dict[str, list[str]]:
    out, target = {}, None
    for line in (repo / "Makefile").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+):", line)
        if m:
            target = m.group(1)
            out.setdefault(target, [])
        elif line.startswith("\t") and target:
            out[target].append(line.strip())
    return out


def test_snakemake_builds_are_quiet(repo):
    recipes = _recipes(repo)
    builds = {t: [c for c in cmds if re.match(r"snakemake --cores", c)] for t, cmds in recipes.items()}
    builds = {t: c for t, c in builds.items() if c}
    assert {"table1", "smoke", "mlflow"} <= set(builds)
    loud = [f"{t}: {c}" for t, cs in builds.items() for c in cs if not c.rstrip().endswith("$(QUIET)")]
    assert not loud, loud
