"""Prints, for each module named in its arguments, whether it was imported before this script
ran (a warm worker's template may have imported it)."""

import sys

print(" ".join(f"{name}={name in sys.modules}" for name in sys.argv[1:]), flush=True)
