#!/usr/bin/env bash
# make test's driver: runs each make target it is given, in order, stops at
# the first that fails ("a+b" runs a and b side by side), and always ends
# by printing the wall time of every
# step it ran (and the slowest Go test packages of the unit step), so a slow
# step is visible in every CI log. Exits with the failing step's status.
set -uo pipefail
make=${MAKE:-make}
unit_log=${ONEJOB_UNIT_LOG:-}
names=() secs=() codes=()
now() { date +%s.%N; }
total0=$(now)
rc=0
secs_since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }
# A step "a+b" runs make a and make b side by side: b's output goes to
# .local/<b>.log and is printed once both ended (a's streams as usual).
for step in "$@"; do
	t0=$(now)
	if [[ $step == *"+"* ]]; then
		main=${step%%+*} side=${step#*+}
		side_log=.local/$side.log
		mkdir -p .local
		( $make --no-print-directory "$side" >"$side_log" 2>&1; echo $? >"$side_log.rc"; secs_since "$t0" >"$side_log.secs" ) &
		side_pid=$!
		$make --no-print-directory "$main"
		rc=$?
		names+=("$main") secs+=("$(secs_since "$t0")") codes+=("$rc")
		wait "$side_pid"
		echo "---- make $side (ran beside $main) ----"
		cat "$side_log"
		side_rc=$(cat "$side_log.rc")
		names+=("$side (beside)") secs+=("$(cat "$side_log.secs")") codes+=("$side_rc")
		[ "$rc" -eq 0 ] && rc=$side_rc
	else
		$make --no-print-directory "$step"
		rc=$?
		names+=("$step") secs+=("$(secs_since "$t0")") codes+=("$rc")
	fi
	[ "$rc" -eq 0 ] || break
done
total1=$(now)
echo
echo "make test: wall time per step"
for i in "${!names[@]}"; do
	st=ok
	[ "${codes[$i]}" -eq 0 ] || st="FAILED (exit ${codes[$i]})"
	printf '  %-24s %8s s  %s\n' "${names[$i]}" "${secs[$i]}" "$st"
done
for step in "$@"; do
	for one in ${step//+/ }; do
		case " ${names[*]} " in *" $one "*) ;; *) printf '  %-24s %8s    not run\n' "$one" "-" ;; esac
	done
done
printf '  %-24s %8s s\n' total "$(awk -v a="$total0" -v b="$total1" 'BEGIN{printf "%.1f", b-a}')"
if [ -n "$unit_log" ] && [ -s "$unit_log" ]; then
	echo "slowest Go test packages (go test's own elapsed time, packages run two at a time):"
	awk -F'\t' '($1 ~ /^(ok|FAIL) *$/) && $3 ~ /^[0-9.]+s$/ { t = $3; sub(/s$/, "", t); sub(/ +$/, "", $1); printf "%8.1f s  %-4s %s\n", t, $1, $2 }' "$unit_log" |
		sort -rn | head -12
fi
exit "$rc"
