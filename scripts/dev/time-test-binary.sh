#!/usr/bin/env bash
# Cargo's runner for test binaries that records where the suite's time goes: for each binary, its
# wall seconds and the CPU seconds the whole machine spent meanwhile (from /proc/stat, so the
# servers and other children a test starts count too, waited for or not; run it on an otherwise
# idle machine), appended to $CATENA_TEST_TIMES (default: test-times.txt in the working directory)
# as "WALL CPU BINARY". A binary whose CPU seconds are far below its wall seconds mostly waits
# (deadlines, servers starting), which is what could run beside the CPU-bound tests.
#
#   CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="$PWD/scripts/dev/time-test-binary.sh" \
#     CATENA_TEST_TIMES=/tmp/times.txt ./scripts/test.sh
#   sort -rn /tmp/times.txt | head
set -euo pipefail
# Busy time of all CPUs in clock ticks: user, nice, system, irq, softirq and steal.
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }
ticks_per_second="$(getconf CLK_TCK)"
cpu_before="$(busy_ticks)"
start="$(date +%s.%N)"
status=0
"$@" || status=$?
awk -v start="$start" -v end="$(date +%s.%N)" -v ticks="$(( $(busy_ticks) - cpu_before ))" \
  -v hz="$ticks_per_second" -v name="$(basename "$1")" \
  'BEGIN { printf "%.1f %.1f %s\n", end - start, ticks / hz, name }' >> "${CATENA_TEST_TIMES:-test-times.txt}"
exit "$status"
