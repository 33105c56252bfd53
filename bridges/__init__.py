"""Bridges from the project's environments to other frameworks' interfaces (a top layer: it imports
``rescue_env`` and the framework it serves; nothing in the project imports it except the command line, lazily)."""
