"""The ``tenter`` command line: one ``cmd_<verb>.py`` per subcommand, listed in main.py."""
