#!/usr/bin/env bash
# The instruction-count guard: counts the instructions (callgrind's Ir, repeatable on a busy
# machine, unlike time) of classifying the committed corpus under 500 and 5 000 rules, of
# in-process Classify handler calls (first-seen and repeated scripts) and of in-process
# Authorize calls (`tests/bench/src/bin/instructions.rs`), and fails when one is
# more than 10 % above the committed baseline, printing the difference and the functions that
# cost the most. `--update` rewrites the baseline: commit it saying why the counts moved.
#
# The counts belong to the pinned toolchain and the release profile; a toolchain update moves
# them, and is a reason to update the baseline.
set -euo pipefail
cd "$(dirname "$0")/.."

update=false
case "${1:-}" in
  --update) update=true ;;
  "") ;;
  *) echo "usage: $0 [--update]" >&2; exit 2 ;;
esac

if ! command -v valgrind >/dev/null; then
  apt-get install -y valgrind || { apt-get update && apt-get install -y valgrind; }
fi

baseline=tests/bench/instructions.baseline
corpus=tests/bench/corpus/classify.txt
# Authorize calls counted (the difference between a run with them and one without).
authorize_calls=40
# Classify handler calls counted, of each kind (first-seen scripts, a repeated one).
handler_calls=200
# How far above the baseline a count may be, in percent.
tolerance=10

cargo build --release --locked --quiet -p toolgate-bench --bin instructions
bin="${CARGO_TARGET_DIR:-target}/release/instructions"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# The total Ir of a callgrind output file.
total() { awk '/^(summary|totals):/ { print $2; exit }' "$1"; }

# callgrind over the binary; the output file is $out/$1.out.
grind() {
  local name=$1
  shift
  valgrind --tool=callgrind --callgrind-out-file="$out/$name.out" "$@" >"$out/$name.log" 2>&1 ||
    { cat "$out/$name.log" >&2; echo "instructions: $name failed under callgrind" >&2; exit 1; }
}

declare -A count
for phase in classify-500 classify-5000; do
  # Only the classification itself: building the policy is not counted.
  grind "$phase" --collect-atstart=no --toggle-collect='*classify_corpus*' "$bin" "$corpus" "$phase"
  grep -h '^classified' "$out/$phase.log"
  count[$phase]=$(total "$out/$phase.out")
done
# The whole handler (wire request to wire answer), per call; the Ir of sha256 is callgrind's
# (valgrind hides the CPU's SHA instructions, so the portable code runs).
for kind in first-seen repeated; do
  phase=classify-handler-$kind
  grind "$phase" --collect-atstart=no --toggle-collect="*instructions::classify_${kind//-/_}*" \
    "$bin" "$corpus" classify-handler "$handler_calls"
  count[$phase]=$(( $(total "$out/$phase.out") / handler_calls ))
done
grep -h '^classified' "$out/classify-handler-repeated.log"
grind authorize-0 "$bin" "$corpus" authorize 0
grind authorize "$bin" "$corpus" authorize "$authorize_calls"
grep -h '^authorized' "$out/authorize.log"
count[authorize]=$(( ($(total "$out/authorize.out") - $(total "$out/authorize-0.out")) / authorize_calls ))

phases=(classify-500 classify-5000 classify-handler-first-seen classify-handler-repeated authorize)
if $update; then
  {
    echo "# Instruction counts (callgrind Ir) that .ci/instructions.sh compares with; written by"
    echo "# \`.ci/instructions.sh --update\`. classify-*: the whole corpus (tests/bench/corpus/"
    echo "# classify.txt) once; classify-handler-*: one Classify handler call, averaged over"
    echo "# $handler_calls; authorize: one Authorize call, averaged over $authorize_calls."
    for p in "${phases[@]}"; do echo "$p ${count[$p]}"; done
  } >"$baseline"
  echo "instructions: wrote $baseline"
  exit 0
fi

failed=()
printf '%-28s %16s %16s %8s\n' phase baseline now change
for p in "${phases[@]}"; do
  base=$(awk -v p="$p" '$1 == p { print $2 }' "$baseline")
  if [ -z "$base" ]; then
    echo "instructions: $baseline has no count for $p; run .ci/instructions.sh --update" >&2
    exit 1
  fi
  now=${count[$p]}
  change=$(awk -v a="$base" -v b="$now" 'BEGIN { printf "%+.1f%%", (b - a) * 100 / a }')
  verdict=""
  if [ "$now" -gt $(( base + base * tolerance / 100 )) ]; then
    verdict="  more than $tolerance % above the baseline"
    failed+=("$p")
  fi
  printf '%-28s %16s %16s %8s%s\n' "$p" "$base" "$now" "$change" "$verdict"
done

if [ "${#failed[@]}" -gt 0 ]; then
  for p in "${failed[@]}"; do
    echo
    echo "== $p: the functions that cost the most (self Ir)"
    # `head` closes the pipe early: that is not a failure of the guard.
    callgrind_annotate --inclusive=no "$out/$p.out" 2>/dev/null |
      sed -n '/file:function/,$p' | head -30 || true
  done
  echo
  echo "instructions: ${failed[*]} got more than $tolerance % more expensive." >&2
  echo "Find the cause; if the cost is intended, run .ci/instructions.sh --update and say why in the commit." >&2
  exit 1
fi
