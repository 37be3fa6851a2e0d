"""What went wrong: hang reports (stacks and flight recorders) and the failures' root cause and
summary."""
