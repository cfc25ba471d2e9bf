"""Run unittest files the way their test.sh does (`python file.py [Class.test]`), recording a
junit XML like pytest's, for the files whose TestResultCollector (qa/common/test_util.py)
needs unittest's own runner.

  python unittest_junit.py OUT.xml FILE.py [Class[.test] ...]
"""

import importlib.util
import os
import sys
import time
import traceback
import unittest
import xml.etree.ElementTree as ET

out, path, names = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
modname = os.path.splitext(os.path.basename(path))[0]
spec = importlib.util.spec_from_file_location(modname, path)
mod = importlib.util.module_from_spec(spec)
sys.modules[modname] = mod
spec.loader.exec_module(mod)
loader = unittest.TestLoader()
suite = loader.loadTestsFromNames(names, mod) if names else loader.loadTestsFromModule(mod)

records = []  # (classname, name, outcome, message, text, seconds)


class Result(unittest.TextTestResult):
    def startTest(self, test):
        self._t0 = time.time()
        super().startTest(test)

    def _rec(self, test, outcome, err=None, msg=""):
        cls = f"{modname}.{type(test).__name__}"
        name = getattr(test, "_testMethodName", str(test))
        text = ""
        if err is not None:
            text = "".join(traceback.format_exception(*err))
            msg = f"{err[0].__name__}: {err[1]}"
        records.append((cls, name, outcome, msg, text, time.time() - getattr(self, "_t0", time.time())))

    def addSuccess(self, test):
        super().addSuccess(test)
        self._rec(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._rec(test, "failure", err)

    def addError(self, test, err):
        super().addError(test, err)
        if isinstance(test, unittest.TestCase):
            self._rec(test, "error", err)
        else:  # setUpClass / tearDownClass failures
            records.append(
                (
                    modname,
                    str(test),
                    "error",
                    f"{err[0].__name__}: {err[1]}",
                    "".join(traceback.format_exception(*err)),
                    0,
                )
            )

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._rec(test, "skipped", msg=reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._rec(test, "passed")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._rec(test, "failure", msg="unexpected success")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self._rec(test, "failure" if issubclass(err[0], test.failureException) else "error", err)


runner = unittest.TextTestRunner(resultclass=Result, verbosity=2)
res = runner.run(suite)

# one row per test (a failed subTest makes the test failed)
final = {}
for cls, name, outcome, msg, text, secs in records:
    k = (cls, name)
    if k not in final or outcome in ("failure", "error"):
        if k in final and final[k][0] in ("failure", "error"):
            continue
        final[k] = (outcome, msg, text, secs)
ts = ET.Element("testsuite", name=modname, tests=str(len(final)))
for (cls, name), (outcome, msg, text, secs) in final.items():
    tc = ET.SubElement(ts, "testcase", classname=cls, name=name, time=f"{secs:.3f}")
    if outcome in ("failure", "error"):
        e = ET.SubElement(tc, outcome, message=msg[:2000])
        e.text = text
    elif outcome == "skipped":
        ET.SubElement(tc, "skipped", message=msg)
root = ET.Element("testsuites")
root.append(ts)
ET.ElementTree(root).write(out)
sys.exit(0 if res.wasSuccessful() else 1)
