#!/usr/bin/env python3
"""Turn the raw perf_analyzer outputs written by bench.sh into a CSV and a table (bench.sh runs it).

    python3 scripts/reference/bench_report.py RAW_DIR OUT.csv [OUT.txt]     (stdlib only)

Prints the table; OUT.txt (if given) gets the run header plus the table.

    python3 scripts/reference/bench_report.py --median RUN1.csv RUN2.csv [...]

Per-scenario median of infer/s, p50, p99 over several bench.sh CSVs (e.g. three runs).
"""
import contextlib
import csv
import os
import re
import statistics
import sys

if sys.argv[1] == "--median":
    runs = [list(csv.DictReader(open(f))) for f in sys.argv[2:]]
    print(f"median over {len(runs)} runs: " + " ".join(sys.argv[2:]))
    print(f"{'scenario':<28} {'infer/s':>9} {'p50 us':>8} {'p99 us':>8}   infer/s per run")
    for row in runs[0]:
        sid = row["scenario"]
        got = [r for run in runs for r in run if r["scenario"] == sid and r["infer_per_s"]]
        if not got:
            print(f"{sid:<28} {'-':>9}")
            continue
        med = lambda k: statistics.median(float(r[k]) for r in got)
        print(f"{sid:<28} {med('infer_per_s'):>9.1f} {med('p50_us'):>8.0f} {med('p99_us'):>8.0f}   "
              + " ".join(f"{float(r['infer_per_s']):.0f}" for r in got))
    sys.exit(0)

raw, out = sys.argv[1], sys.argv[2]
txt_out = sys.argv[3] if len(sys.argv) > 3 else None
rows = []
for line in open(os.path.join(raw, "index.txt")):
    sid, model, proto, conc, n, extra, status = line.rstrip("\n").split("|")
    row = {"scenario": sid, "model": model, "protocol": proto, "concurrency": int(conc),
           "window_requests": int(n), "extra_args": extra, "status": status,
           "infer_per_s": "", "p50_us": "", "p90_us": "", "p99_us": "", "avg_us": "",
           "server_queue_us": "", "server_compute_us": "", "server_avg_batch": "", "spread_pct": ""}
    csv_path = os.path.join(raw, sid + ".csv")
    txt = open(os.path.join(raw, sid + ".txt"), errors="replace").read()
    # -v prints one "Pass [i] throughput: X infer/sec" per window; the last attempt's last 3 are reported
    last = txt.split("*** Measurement Settings ***")[-1]
    passes = [float(x) for x in re.findall(r"Pass \[\d+\] throughput: ([\d.]+) infer/sec", last)]
    if len(passes) >= 3 and min(passes[-3:]) > 0:
        row["spread_pct"] = round((max(passes[-3:]) / min(passes[-3:]) - 1) * 100, 1)
    row["windows"] = len(passes)
    if status != "failed" and os.path.exists(csv_path):
        recs = list(csv.DictReader(open(csv_path)))
        if recs:
            r = recs[0]
            row["infer_per_s"] = float(r["Inferences/Second"])
            for k, col in (("p50_us", "p50 latency"), ("p90_us", "p90 latency"), ("p99_us", "p99 latency")):
                row[k] = int(r[col]) if r.get(col) else ""
            # the server-side columns: absent when the server answers no statistics
            with contextlib.suppress(KeyError, ValueError):
                row["server_queue_us"] = int(r["Server Queue"])
                row["server_compute_us"] = (int(r["Server Compute Input"]) + int(r["Server Compute Infer"])
                                            + int(r["Server Compute Output"]))
        m = re.search(r"Avg latency: (\d+) usec \(standard", last)
        if m:
            row["avg_us"] = int(m.group(1))
        # top-level server section (before "Composing models")
        server = last.split("Composing models")[0]
        mi = re.search(r"Server: \s*\n\s*Inference count: (\d+)\s*\n\s*Execution count: (\d+)", server)
        if mi and int(mi.group(2)) > 0 and model != "ensemble_add_sub":
            row["server_avg_batch"] = round(int(mi.group(1)) / int(mi.group(2)), 2)
    else:
        err = [ln for ln in txt.splitlines() if ln.strip()][-1:] or ["?"]
        row["status"] = "failed: " + err[0][:120]
    rows.append(row)

with open(out, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
    w.writeheader()
    w.writerows(rows)

hdr = (f"{'scenario':<28} {'proto':<5} {'conc':>4} {'infer/s':>9} {'p50 us':>8} {'p99 us':>8} {'avg us':>8} "
       f"{'srv batch':>9} {'spread%':>7}  status")
table = [hdr, "-" * len(hdr)]
for r in rows:
    ips = f"{r['infer_per_s']:.1f}" if r["infer_per_s"] != "" else "-"
    table.append(f"{r['scenario']:<28} {r['protocol']:<5} {r['concurrency']:>4} {ips:>9} {str(r['p50_us'] or '-'):>8} "
                 f"{str(r['p99_us'] or '-'):>8} {str(r['avg_us'] or '-'):>8} {str(r['server_avg_batch'] or '-'):>9} "
                 f"{str(r['spread_pct']) if r['spread_pct'] != '' else '-':>7}  "
                 f"{r['status']}")
table.append("(srv batch = server inference_count / execution_count of the model itself, from perf_analyzer's "
             "server-side stats; '-' for the ensemble. spread% = max/min-1 of throughput over the 3 reported windows)")
print("\n".join(table))
if txt_out:
    with open(txt_out, "w") as f:
        f.write(open(os.path.join(raw, "header.txt")).read() + "\n".join(table) + "\n")
