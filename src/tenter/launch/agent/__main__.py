"""``python -m tenter.launch.agent PLAN_JSON HOST_INDEX RDZV_PORT`` (see :mod:`.main`)."""

import logging
import os
import sys

from tenter.launch.agent.main import main

code = main(sys.argv[1:])
# Everything is written; skip interpreter finalisation (a second with torch loaded), which
# would only delay the launcher's view of this host's end.
logging.shutdown()
os._exit(code)
