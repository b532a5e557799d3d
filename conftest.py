# Registers the onegpu kit plugin for everything under this folder.
pytest_plugins = ["plugin"]
