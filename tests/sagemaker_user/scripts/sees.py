"""A SageMaker training script that records what it was given: its arguments and the SM_*
variables, in SM_OUTPUT_DATA_DIR/sees.json."""

import json
import os
import sys

seen = {"argv": sys.argv[1:], "env": {k: v for k, v in os.environ.items() if k.startswith("SM_")}}
with open(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "sees.json"), "w") as f:
    json.dump(seen, f)
