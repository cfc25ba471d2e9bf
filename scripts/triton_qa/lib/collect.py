"""Collect the cases of one server's run into RESULTS/cases.tsv (run.sh calls it at the end).

  python collect.py RESULTS        (RESULTS = $QA_DIR/results/<server>)

Row: run_id <TAB> case <TAB> outcome (passed/failed/error/skipped/timeout) <TAB> short message
Plus, for the in-model unittest runners (test_infer_shm_leak.py: bls*, argument_validation,
custom_metrics), the inner unittest failures found in the server log go to inner.tsv.
"""

import glob
import os
import re
import sys
import xml.etree.ElementTree as ET

res = sys.argv[1]
server = os.path.basename(res.rstrip("/"))


def short(msg, n=300):
    msg = (msg or "").strip().replace("\t", " ")
    lines = [line for line in msg.splitlines() if line.strip()]
    # prefer the exception line
    for line in lines:
        if re.match(r"^(E\s+)?\w*(Error|Exception)\b", line.strip()) or "AssertionError" in line:
            return line.strip()[:n]
    return (lines[0] if lines else "")[:n]


def parse(xmlp):
    out = []
    root = ET.parse(xmlp).getroot()
    for tc in root.iter("testcase"):
        name = f"{tc.get('classname')}::{tc.get('name')}"
        outcome, msg = "passed", ""
        for child in tc:
            if child.tag in ("failure", "error"):
                outcome = "failed" if child.tag == "failure" else "error"
                msg = short((child.get("message") or "") + "\n" + (child.text or ""))
                break
            if child.tag == "skipped":
                outcome, msg = "skipped", short(child.get("message"))
        out.append((name, outcome, msg))
    return out


rows = []
for out in sorted(glob.glob(f"{res}/*.out")):
    rid = os.path.basename(out)[:-4]
    if ".try1" in rid:
        continue
    xmlp = f"{res}/{rid}.xml"
    if os.path.exists(xmlp) and os.path.getsize(xmlp) > 0:
        first = {}
        t1 = f"{res}/{rid}.try1.xml"
        if os.path.exists(t1) and os.path.getsize(t1) > 0:
            first = {n: (o, m) for n, o, m in parse(t1)}
        for name, outcome, msg in parse(xmlp):
            o1, m1 = first.get(name, (None, ""))
            if outcome == "passed" and o1 in ("failed", "error"):
                msg = f"FLAKY: passed on 2nd attempt; 1st: {m1}"
            elif outcome in ("failed", "error") and o1 == "passed":
                outcome, msg = "passed", f"FLAKY: passed on 1st attempt; 2nd: {msg}"
            rows.append((rid, name, outcome, msg))
    else:
        col = f"{res}/{rid}.collect"
        names = []
        if os.path.exists(col):
            with open(col) as f:
                names = [line.strip() for line in f if "::" in line]
        for n in names or ["<file>"]:
            rows.append((rid, n, "timeout", "no junit result (per-file timeout or crash)"))

with open(f"{res}/cases.tsv", "w") as f:
    for r in rows:
        f.write("\t".join(r) + "\n")

# inner unittest results printed by models that run unittest.main() in the server
inner = []
for log in sorted(glob.glob(f"{res}/*.server.log")):
    with open(log, errors="replace") as f:
        text = f.read()
    for m in re.finditer(r"^(FAIL|ERROR): (\w+) \(([\w.]+)\)", text, re.M):
        inner.append((os.path.basename(log), m.group(3) + "." + m.group(2), m.group(1)))
    for m in re.finditer(r"^Ran (\d+) tests? in [\d.]+s\s*\n\s*\n?(OK.*|FAILED.*)$", text, re.M):
        inner.append((os.path.basename(log), "summary", f"Ran {m.group(1)}: {m.group(2)}"))
with open(f"{res}/inner.tsv", "w") as f:
    for r in inner:
        f.write("\t".join(r) + "\n")

tot = len(rows)
cnt = {}
for r in rows:
    cnt[r[2]] = cnt.get(r[2], 0) + 1
print(f"[collect] {server}: {tot} cases: {cnt}  -> {res}/cases.tsv, inner.tsv ({len(inner)} lines)")
