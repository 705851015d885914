"""The benchmark: `python -m lenet.bench` (DESIGN.md §7).

cli       arguments, the plan of runs, one fresh worker process per backend x device x variant
worker    one run: correctness check against the reference, then latency, throughput, training
floors    what the machine cannot beat: empty launch + sync, tiny copies, the SGEMM arithmetic floor
loc       lines of code per backend (pygount over each backend's SOURCES)
stats     percentiles and summaries
meta      versions, machine, clocks, git commit
raw       each run's result kept in <out>/raw/ as it finishes; the document assembled from them
report    results.json, results.md, PNG plots from <out>/raw/ (python -m lenet.bench.report <out>)
"""
