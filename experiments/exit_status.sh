#!/bin/bash
# Exit statuses of N finished runs of two cases (issue 48 item 7b: a run that did its work
# could abort with SIGABRT, "FATAL: exception not rethrown", as the interpreter exited):
#
#   ordinary  jaxsel train --out a --steps 30 --checkpoint-every 10 --keep 2   (expect 0)
#   fill      the same run with its checkpoint folder on an 8 MiB tmpfs filled once the
#             checkpoint of step 4 is written: one line, exit 2                 (expect 2)
#
# Usage: experiments/exit_status.sh CASE N [CHECKOUT]   (CHECKOUT: the jaxsel to run, default
# this one). Prints each run's exit status (and the last lines of a run that exited
# otherwise), then the count of each status.
# "fill" needs `unshare --mount --map-root-user` (a private tmpfs without root). Each run
# works in a fresh temporary folder; the ordinary case shares one XLA compilation cache.
set -u
case_=${1:?ordinary or fill}; n=${2:?number of runs}
checkout=$(cd "${3:-$(dirname "$0")/..}" && pwd)
python=${PYTHON:-python}
work=$(mktemp -d -t jaxsel-exit-status-XXXXXX)
trap 'rm -rf "$work"' EXIT
export JAX_COMPILATION_CACHE_DIR="$work/xla-cache" JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0
fill_script="$work/fill_then_train.py"
"$python" - "$checkout/tests/test_run_safety.py" "$fill_script" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
open(sys.argv[2], "w").write(re.search(r'FILL_THEN_TRAIN = """(.*?)"""', text, re.S).group(1))
PY
for i in $(seq 1 "$n"); do
  run="$work/run-$i"; mkdir -p "$run/disk"
  if [ "$case_" = ordinary ]; then
    (cd "$run" && PYTHONPATH="$checkout" timeout 600 "$python" -m jaxsel.cli train --out a --steps 30 \
       --checkpoint-every 10 --keep 2 --no-progress > out.txt 2> err.txt)
  else
    mount="mount -t tmpfs -o size=8m tmpfs $run/disk && exec \"\$0\" \"\$@\""
    (cd "$run" && PYTHONPATH="$checkout" JAX_NUM_CPU_DEVICES=8 timeout 600 unshare --mount --map-root-user \
       sh -c "$mount" "$python" "$fill_script" "$run/disk/ck" "$run/out" > out.txt 2> err.txt)
  fi
  status=$?
  echo "$i $status" >> "$work/statuses"
  echo "run $i: exit status $status"
  expected=$([ "$case_" = ordinary ] && echo 0 || echo 2)
  [ "$status" -ne "$expected" ] && tail -n 3 "$run/err.txt"
  rm -rf "$run"
done
awk '{count[$2]++} END {for (s in count) print "exit status " s ": " count[s] " of " NR " runs"}' "$work/statuses"
