"""inferd's version, in a module of its own: ``engine/server.py`` reads it while ``inferd/__init__.py``
may still be importing the server (it imports nothing; pyproject.toml's ``version`` is the same)."""

__version__ = "0.1.0"
