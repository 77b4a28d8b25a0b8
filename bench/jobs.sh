#!/usr/bin/env bash
# Job store benchmark: restart time with 100,000 jobs in mixed states, claim + complete throughput, and tiny real
# transcodes in this process against sandboxed child processes (the per-job cost of the child).
# Usage: bench/jobs.sh [JOBS] [TRIVIAL_JOBS] [TINY_JOBS]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
scripts/deps
scripts/build-release jobs-bench
scripts/build-release transcoderd
TRANSCODERD_BINARY=$PWD/.build/release/transcoderd .build/release/jobs-bench "${1:-100000}" "${2:-3000}" "${3:-200}"
