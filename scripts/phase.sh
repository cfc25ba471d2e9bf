#!/usr/bin/env bash
# A phase of make test: `scripts/phase.sh NAME COMMAND...` prints a line when it starts and one when it
# ends, with its time and how it ended, and exits with the command's status.
name=$1
shift
echo "==> $name" >&2
start=$(date +%s)
"$@"
status=$?
s=$(($(date +%s) - start))
took=$([ $s -ge 60 ] && echo "$((s / 60))m $((s % 60))s" || echo "${s}s")
if [ $status = 0 ]; then
  echo "==> $name: ok in $took" >&2
else
  echo "==> $name: FAILED (exit $status) after $took" >&2
fi
exit $status
