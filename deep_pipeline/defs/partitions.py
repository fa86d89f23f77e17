"""Dynamic partitions: new compiles, matrices and iterations need no code change.

Keys: `compiles` = `<skill>-<6 hex>`; `matrices` = `<compile>/<level>/m<NN>`;
`iterations` = `<compile>/<level>/i<NN>` (see deep_pipeline.core.keys).
"""

import dagster as dg

compiles_partitions = dg.DynamicPartitionsDefinition(name="compiles")
matrices_partitions = dg.DynamicPartitionsDefinition(name="matrices")
iterations_partitions = dg.DynamicPartitionsDefinition(name="iterations")
