#!/usr/bin/env bash
# Cargo's runner for test binaries that records where the suite's time goes: each binary's wall,
# user and system seconds (its children included, when it waits for them) are appended to
# $CATENA_TEST_TIMES (default: test-times.txt in the working directory) as
# "WALL USER SYSTEM BINARY". A binary whose CPU seconds are far below its wall seconds mostly waits
# (deadlines, servers starting), which is what could run beside the CPU-bound tests.
#
#   CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="$PWD/scripts/dev/time-test-binary.sh" \
#     CATENA_TEST_TIMES=/tmp/times.txt ./scripts/test.sh
#   sort -rn /tmp/times.txt | head
set -euo pipefail
[ -x /usr/bin/time ] || { echo "GNU time is needed (Debian's package time)" >&2; exit 2; }
exec /usr/bin/time -a -o "${CATENA_TEST_TIMES:-test-times.txt}" -f "%e %U %S $(basename "$1")" "$@"
