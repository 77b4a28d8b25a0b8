#!/usr/bin/env bash
# Job store benchmark: restart time with 100,000 jobs in mixed states, and claim + complete throughput.
# Usage: bench/jobs.sh [JOBS] [TRIVIAL_JOBS]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
scripts/deps
swift build -c release --product jobs-bench >&2
.build/release/jobs-bench "${1:-100000}" "${2:-3000}"
