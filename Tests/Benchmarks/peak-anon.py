"""python3 Tests/Benchmarks/peak-anon.py INPUT COMMAND...: runs COMMAND with INPUT as standard input (output
discarded) and prints its wall time and peak anonymous memory (RssAnon, sampled every 20 ms: the heap and
stacks, not the store's mapped pages). docs/benchmarks.md."""
import subprocess
import sys
import time

with open(sys.argv[1], "rb") as standard_input:
    process = subprocess.Popen(sys.argv[2:], stdin=standard_input, stdout=subprocess.DEVNULL)
    peak, start = 0, time.time()
    while process.poll() is None:
        try:
            with open(f"/proc/{process.pid}/status") as status:
                for line in status:
                    if line.startswith("RssAnon"):
                        peak = max(peak, int(line.split()[1]))
        except FileNotFoundError:
            pass
        time.sleep(0.02)
print(f"exit {process.returncode} wall {time.time() - start:.1f}s peak RssAnon {peak / 1024:.1f} MiB")
