"""What happens inside a step, as it happens: a rollout ended, a column was scored.

One stdlib logger. The CLI shows it on a terminal (cli/compile_commands.py); nothing else
listens, and nothing reads it back: the step's record stays the only result.
"""

import logging

LIVE = logging.getLogger("deep_pipeline.live")
