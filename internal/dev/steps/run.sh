#!/usr/bin/env bash
# make test's driver: runs each make target it is given, in order, stops at
# the first that fails ("a+b,c" runs b then c beside a), and always ends
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
# A step "a+b,c" runs make a, and beside it make b then make c: their
# output goes to .local/beside.log and is printed once all ended (a's
# streams as usual); each is timed on its own.
for step in "$@"; do
	t0=$(now)
	if [[ $step == *"+"* ]]; then
		main=${step%%+*} side=${step#*+}
		mkdir -p .local
		side_log=.local/beside.log side_times=.local/beside.times
		: >"$side_times"; : >"$side_log"
		(
			for one in ${side//,/ }; do
				s0=$(now)
				$make --no-print-directory "$one" >>"$side_log" 2>&1
				code=$?
				echo "$one $(secs_since "$s0") $code" >>"$side_times"
				[ "$code" -eq 0 ] || break
			done
		) &
		side_pid=$!
		$make --no-print-directory "$main"
		rc=$?
		names+=("$main") secs+=("$(secs_since "$t0")") codes+=("$rc")
		wait "$side_pid"
		echo "---- ${side//,/, } (ran beside $main) ----"
		cat "$side_log"
		while read -r one took code; do
			names+=("$one (beside)") secs+=("$took") codes+=("$code")
			[ "$rc" -eq 0 ] && rc=$code
		done <"$side_times"
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
	for one in $(tr '+,' '  ' <<<"$step"); do
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
