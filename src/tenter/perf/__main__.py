import sys

from tenter.perf.worker import main

sys.exit(main())
