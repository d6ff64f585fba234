#!/usr/bin/env bash
# make test's driver: runs each make target it is given, in order, stops at
# the first that fails, and always ends by printing the wall time of every
# step it ran (and the slowest Go test packages of the unit step), so a slow
# step is visible in every CI log. Exits with the failing step's status.
set -uo pipefail
make=${MAKE:-make}
unit_log=${ONEJOB_UNIT_LOG:-}
names=() secs=() codes=()
now() { date +%s.%N; }
total0=$(now)
rc=0
for step in "$@"; do
	t0=$(now)
	$make --no-print-directory "$step"
	rc=$?
	t1=$(now)
	names+=("$step") secs+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')") codes+=("$rc")
	[ "$rc" -eq 0 ] || break
done
total1=$(now)
echo
echo "make test: wall time per step"
for i in "${!names[@]}"; do
	st=ok
	[ "${codes[$i]}" -eq 0 ] || st="FAILED (exit ${codes[$i]})"
	printf '  %-14s %8s s  %s\n' "${names[$i]}" "${secs[$i]}" "$st"
done
for step in "$@"; do
	case " ${names[*]} " in *" $step "*) ;; *) printf '  %-14s %8s    not run\n' "$step" "-" ;; esac
done
printf '  %-14s %8s s\n' total "$(awk -v a="$total0" -v b="$total1" 'BEGIN{printf "%.1f", b-a}')"
if [ -n "$unit_log" ] && [ -s "$unit_log" ]; then
	echo "slowest Go test packages (go test's own elapsed time, packages run two at a time):"
	awk -F'\t' '($1 ~ /^(ok|FAIL) *$/) && $3 ~ /^[0-9.]+s$/ { t = $3; sub(/s$/, "", t); sub(/ +$/, "", $1); printf "%8.1f s  %-4s %s\n", t, $1, $2 }' "$unit_log" |
		sort -rn | head -12
fi
exit "$rc"
