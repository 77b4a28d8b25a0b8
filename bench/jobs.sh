#!/usr/bin/env bash
# Job store benchmark: restart time with 100,000 jobs in mixed states, and claim + complete throughput.
# Usage: bench/jobs.sh [JOBS] [TRIVIAL_JOBS]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
scripts/deps
scripts/build-release jobs-bench
.build/release/jobs-bench "${1:-100000}" "${2:-3000}"
