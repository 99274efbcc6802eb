"""params.yaml, read once, validated and resolved: the one place every number of a run comes from.

params.yaml is the one place a number lives. This package turns it into fully resolved configurations
(one per experiment, one per (experiment, method, seed) run) that the CLI, the Snakefile and the tests
all share, and refuses bad input before any work starts. One concern a module:

- ``reading``: the file as written (UTF-8, YAML or JSON, no duplicate key, a mapping);
- ``legacy``: the earlier layout upgraded; ``layers``: the scales' overlays (smoke, rehearsal);
- ``installed``, ``schema``, ``semantics``: validation (the methods named, the schema, what it cannot say);
- ``load``: the three together (``load_params``);
- ``resolve``: an experiment at a scale, its seeds and sweep points, one run's configuration;
- ``paths``: where a scale's files live; ``tables``: what a table plans; ``replacements``: what a scale's
  shared values replace, said in one line;
- ``names``: the methods, variants and models params.yaml may name (torch-free);
- ``rerun``: the rerun rule (numerics versions, recorded defaults, configuration changes);
- ``model``: the resolved study as frozen typed objects (``Study``, ``RunSpec``, ...);
- ``stamp``: the planner's stamp on the configuration it validated, which its jobs trust.
"""

from fedbayes.frontdoor import ConfigError
from fedbayes.study.installed import check_implementations
from fedbayes.study.layers import (SCALES, STAND_IN, deep_merge, overlay, smoke_overlay_path, stand_in_size,
                                   with_smoke_overlay)
from fedbayes.study.legacy import upgrade_layout
from fedbayes.study.load import as_read, load_params
from fedbayes.study.names import (HPARAM_DEFAULTS, METHOD_SPECS, METHOD_VARIANTS, MODEL_KEYS, MODEL_NAMES,
                                  split_variant)
from fedbayes.study.paths import paths, raw_root, recorded_stand_in
from fedbayes.study.reading import load_params_text
from fedbayes.study.replacements import overlay_replacements
from fedbayes.study.rerun import (CORE_NUMERICS, FROZEN_DEFAULTS, METHOD_NUMERICS, RECORDED_ONLY, config_changes,
                                  config_hash, default_changes, defaults_key, method_defaults, numerics,
                                  recorded_defaults)
from fedbayes.study.resolve import (DEFAULT_POINT, POINT_ID, experiment_config, method_hparams, partition_config,
                                    run_config, save_rounds, seeds, selection, selection_seeds, sweep_points,
                                    swept_points)
from fedbayes.study.schema import complete_schema, validate
from fedbayes.study.semantics import check_semantics
from fedbayes.study.tables import comparable_experiments, table_figures

__all__ = [
    "ConfigError", "check_implementations", "SCALES", "STAND_IN", "deep_merge", "overlay", "smoke_overlay_path",
    "stand_in_size", "with_smoke_overlay", "upgrade_layout", "as_read", "load_params", "HPARAM_DEFAULTS",
    "METHOD_SPECS", "METHOD_VARIANTS", "MODEL_KEYS", "MODEL_NAMES", "split_variant", "paths", "raw_root",
    "recorded_stand_in", "load_params_text", "overlay_replacements", "CORE_NUMERICS", "FROZEN_DEFAULTS",
    "METHOD_NUMERICS", "RECORDED_ONLY", "config_changes", "config_hash", "default_changes", "defaults_key",
    "method_defaults", "numerics", "recorded_defaults", "DEFAULT_POINT", "POINT_ID", "experiment_config",
    "method_hparams", "partition_config", "run_config", "save_rounds", "seeds", "selection", "selection_seeds",
    "sweep_points", "swept_points", "complete_schema", "validate", "check_semantics", "comparable_experiments",
    "table_figures",
]
