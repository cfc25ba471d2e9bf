"""``inferd check``: the offline repository checker (``runner.py``).

Every model's config is read, completed and validated as the server would at load (``config.py``),
checked against its model files where the framework is installed (``files.py``), and every
ensemble against its steps (``ensembles.py``); each problem is placed at its line and column in the
config text (``positions.py``, ``locate.py``) and printed as ``file:line:column: severity: message``
(``report.py``). Nothing is loaded, and no Python model code is imported unless asked.
"""

from inferd.check.config import CheckOptions
from inferd.check.report import Problem
from inferd.check.runner import add_arguments, check_repositories, run

__all__ = ["CheckOptions", "Problem", "add_arguments", "check_repositories", "run"]
