#!/usr/bin/env python3
"""Medians of bench/matrix.sh's runs as a Markdown table.

table.py RESULTS.jsonl CONDITIONS  -> the table on stdout
table.py --doc DOC.md TABLE.md     -> put TABLE.md between the matrix markers of DOC.md
"""
import json
import statistics
import sys

BEGIN, END = "<!-- matrix:begin -->", "<!-- matrix:end -->"
ACTS = {"one": 1, "chain20": 20, "hold": 1}


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def f(x, fmt="{:.1f}"):
    return "–" if x is None else fmt.format(x)


def ratio(a, b):
    return None if a is None or not b else a / b


def cells(rows):
    out = {}
    for r in rows:
        out.setdefault((r["server"], r["worker"], r["workload"]), []).append(r)
    return out


def summary(runs, workload):
    acts = ACTS[workload]
    per_act = lambda r, k: (r[k] * 1e3 / (r["completed"] * acts)) if r.get("completed") else None
    return {
        "runs": len(runs),
        "wfs": med([r.get("wf_per_s") for r in runs]),
        "wfs_all": [r.get("wf_per_s") or 0 for r in runs],
        "p50": med([r.get("p50_ms") for r in runs]),
        "p99": med([r.get("p99_ms") for r in runs]),
        "wcpu": med([per_act(r, "worker_cpu_s") for r in runs]),
        "scpu": med([per_act(r, "server_cpu_s") for r in runs]),
        "dcpu": med([per_act(r, "driver_cpu_s") for r in runs]),
        "wrss": med([r.get("worker_rss_kib", 0) / 1024 for r in runs]),
        "wanon": med([r["worker_anon_kib"] / 1024 if r.get("worker_anon_kib") is not None else None for r in runs]),
        "srss": med([r.get("server_rss_kib", 0) / 1024 for r in runs]),
        "drss": med([r.get("driver_rss_kib", 0) / 1024 for r in runs]),
        "thr": med([r.get("worker_threads_max") for r in runs]),
        "failed": sum(max(r.get("failed") or 0, 0) for r in runs),
    }


def table(results, conditions):
    rows = [json.loads(l) for l in open(results) if l.strip()]
    cs = {k: summary(v, k[2]) for k, v in cells(rows).items()}
    cond = open(conditions).read().strip().replace("\n", "; ")
    o = ["Conditions: " + cond + ".", ""]
    o.append("| server | worker | workload | wf/s median (runs) | p50 / p99 ms | CPU ms per activity: worker / server / driver | "
             "peak RSS MiB: worker / server / driver | worker peak RssAnon MiB | worker threads (max) | failed |")
    o.append("|---|---|---|---|---|---|---|---|---|---|")
    order = {"one": 0, "chain20": 1, "hold": 2}
    for k in sorted(cs, key=lambda k: (order.get(k[2], 9), k[0], k[1])):
        s = cs[k]
        runs = ", ".join("%.0f" % x if x >= 10 else "%.1f" % x for x in s["wfs_all"])
        o.append("| %s | %s | %s | **%s** (%s) | %s / %s | %s / %s / %s | %s / %s / %s | %s | %s | %d |" % (
            k[0], "dbx-loadgen (client+worker)" if k[1] == "loadgen" else k[1], k[2],
            f(s["wfs"]), runs, f(s["p50"]), f(s["p99"]), f(s["wcpu"], "{:.2f}"), f(s["scpu"], "{:.2f}"),
            f(s["dcpu"], "{:.2f}"), f(s["wrss"]), f(s["srss"]), f(s["drss"]), f(s["wanon"]), f(s["thr"], "{:.0f}"), s["failed"]))
    o += ["", "Ratios (medians of the same run):", ""]
    o.append("| server | workload | C / Go throughput | C / Go CPU per activity | C / Go RSS | C / Go RssAnon | C / TS throughput | C / TS RSS |")
    o.append("|---|---|---|---|---|---|---|---|")
    for srv in sorted({k[0] for k in cs}):
        for wl in sorted({k[2] for k in cs}, key=lambda w: order.get(w, 9)):
            c, g, t = cs.get((srv, "c", wl)), cs.get((srv, "go", wl)), cs.get((srv, "ts", wl))
            if not c:
                continue
            r = lambda a, b, key: f(ratio(a and a[key], b and b[key]), "{:.2f}")
            o.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (srv, wl, r(c, g, "wfs"), r(c, g, "wcpu"), r(c, g, "wrss"),
                                                                 r(c, g, "wanon"), r(c, t, "wfs"), r(c, t, "wrss")))
    for srv in sorted({k[0] for k in cs}):
        for wl in sorted({k[2] for k in cs}, key=lambda w: order.get(w, 9)):
            c, b = cs.get((srv, "c", wl)), cs.get((srv, "cbase", wl))
            if c and b:
                if not any("C worker after / before" in x for x in o):
                    o += ["", "| C worker after / before (c / cbase) | throughput | CPU per activity | p50 |", "|---|---|---|---|"]
                o.append("| %s, %s | %s | %s | %s |" % (srv, wl, f(ratio(c["wfs"], b["wfs"]), "{:.2f}"),
                                                   f(ratio(c["wcpu"], b["wcpu"]), "{:.2f}"), f(ratio(c["p50"], b["p50"]), "{:.2f}")))
    o += ["", "| service ratio durabox / Temporal | throughput | p50 |", "|---|---|---|"]
    for wrk in ("loadgen", "go", "c", "ts"):
        for wl in ("one", "chain20"):
            d, t = cs.get(("durabox", wrk, wl)), cs.get(("temporal", wrk, wl))
            if d and t:
                o.append("| %s, %s | %s× | %s× |" % (wrk, wl, f(ratio(d["wfs"], t["wfs"])), f(ratio(d["p50"], t["p50"]), "{:.3f}")))
    return "\n".join(o) + "\n"


def doc(path, table_path):
    text, tab = open(path).read(), open(table_path).read()
    block = BEGIN + "\n" + tab + END
    if BEGIN in text and END in text:
        a, rest = text.split(BEGIN, 1)
        text = a + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n# The matrix (bench/matrix.sh)\n\n" + block + "\n"
    open(path, "w").write(text)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--doc":
        doc(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3:
        sys.stdout.write(table(sys.argv[1], sys.argv[2]))
    else:
        sys.exit(__doc__)
