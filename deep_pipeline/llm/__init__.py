"""The model layer: judge, editor and comparator calls through litellm (SPEC §3, §5, §6, §9).

Importing this package is cheap: litellm (several seconds to import) is loaded on the
first model call, so the Dagster definitions can import the names without paying for it.
"""

import os

# litellm reads this when it is imported: use the bundled price list, never fetch one.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
