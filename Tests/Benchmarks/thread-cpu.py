"""python3 Tests/Benchmarks/thread-cpu.py STORE INPUT LEDGER [init]: submits INPUT (`--trust-decoded`) into
STORE (initialised fresh first with `init`) and prints the wall time and, per thread of the `ledger`
process, its user and system CPU (`/proc/PID/task/TID/stat`), its time on a CPU and its time waiting for
one (`schedstat`), polled every 20 ms; threads in creation order (the main thread writing the answers,
the writer, the reader, then the parse workers and the disposal thread). docs/benchmarks.md."""
import os
import shutil
import subprocess
import sys
import time

store, lines, ledger = sys.argv[1:4]
if len(sys.argv) > 4 and sys.argv[4] == "init":
    shutil.rmtree(store, ignore_errors=True)
    subprocess.run(
        [ledger, "init", "--bundle-id", "com.example.myrecipes", "--environment", "Production", "--app-apple-id", "1234567890", "--store", store],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
tick = os.sysconf("SC_CLK_TCK")
start = time.time()
with open(lines, "rb") as standard_input:
    process = subprocess.Popen([ledger, "submit", "--trust-decoded", "--store", store], stdin=standard_input,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    last = {}
    while process.poll() is None:
        try:
            for tid in os.listdir(f"/proc/{process.pid}/task"):
                try:
                    stat = open(f"/proc/{process.pid}/task/{tid}/stat").read()
                    fields = stat[stat.rindex(")") + 2:].split()
                    on_cpu, waiting = open(f"/proc/{process.pid}/task/{tid}/schedstat").read().split()[:2]
                    last[tid] = (int(fields[11]), int(fields[12]), int(on_cpu), int(waiting))
                except (OSError, ValueError):
                    pass  # the thread ended between the listing and the read
        except OSError:
            pass
        time.sleep(0.02)
wall = time.time() - start
print(f"wall {wall:.2f}s exit {process.returncode}")
total = 0
for tid in sorted(last, key=int):
    user, system, on_cpu, waiting = last[tid]
    total += on_cpu
    if user + system > 5:
        print(f"  thread {tid:>8s} user {user / tick:6.2f} sys {system / tick:6.2f} on-cpu {on_cpu / 1e9:6.2f} waiting {waiting / 1e9:6.2f}")
print(f"  all threads on a CPU {total / 1e9:.2f}s ({total / 1e9 / wall:.2f} cores)")
