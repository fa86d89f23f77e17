"""Dynamic partitions: new compiles, matrices and iterations need no code change.

Keys: `compiles` = `<skill>-<6 hex>`; `matrices` = `<compile>/<level>/m<NN>`;
`iterations` = `<compile>/<level>/i<NN>` (see deep_pipeline.core.keys).
"""

import dagster as dg

from deep_pipeline.engine.steps import COMPILES, ITERATIONS, MATRICES

compiles_partitions = dg.DynamicPartitionsDefinition(name=COMPILES)
matrices_partitions = dg.DynamicPartitionsDefinition(name=MATRICES)
iterations_partitions = dg.DynamicPartitionsDefinition(name=ITERATIONS)
