"""A fake agent that prints its whole environment as one JSON object (text format)."""

import json
import os

print(json.dumps(dict(os.environ), sort_keys=True))
