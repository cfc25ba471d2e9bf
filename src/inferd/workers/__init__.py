"""``inferd serve --workers N``: N serving processes behind the same ports.

``supervisor.py`` starts the processes and keeps them running, ``place.py`` is what a process knows
of its place among them, ``peers.py`` the links between them: statistics and metrics of the whole
server, model control that reaches every process.
"""
