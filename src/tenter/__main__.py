from tenter.cli.main import entry

entry()
