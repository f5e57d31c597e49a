#!/usr/bin/env bash
# Mutation testing with gremlins (tools/go.mod), one package at a time, then a
# summary per package. Not part of `make test`: run it once per issue that
# touches these packages, and compare with the table in scripts/README.md.
#
#   scripts/mutate.sh                                  every package below
#   scripts/mutate.sh ./server/signing ./server/push   only these
#   WORKERS=1 TIMEOUT_COEFFICIENT=20 scripts/mutate.sh ./server/hub
#   EXCLUDE='^(publish|receive)\.go$' scripts/mutate.sh ./server/cluster
#                                      all but these files (a long run split
#                                      in parts, each against every test)
#   DIFF=<git revision> scripts/mutate.sh ./server/cluster
#                                      only the lines changed since that
#                                      revision (gremlins' --diff): a file's
#                                      later part, against a throwaway commit
#                                      that cuts the file where to start
#   FIRST='^Test(State|Rebuild)' scripts/mutate.sh ./server/cluster
#                                      each mutant meets these tests first,
#                                      and the whole suite only if they pass
#                                      (the same verdicts, in a fraction of
#                                      the time when the file's own tests
#                                      are picked)
#
# A mutant KILLED makes a test fail, LIVED passes every test, NOT COVERED is
# on code no test runs (not tried), TIMED OUT makes the tests hang past the
# package's coverage run × TIMEOUT_COEFFICIENT. Efficacy is killed ÷ (killed
# + lived), as gremlins counts it; "efficacy excl. equivalent" leaves out the
# lived mutants listed in scripts/mutate-equivalent.md (mutations that cannot
# change what the code does), matched by file:line:column and type.
#
# Results (gremlins' JSON and log per package) go to $MUTATE_OUT, bin/mutate
# by default. Tests run without -race, with -count=1 and -failfast (a killed
# mutant stops at its first failing test).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# Every package with logic of its own but server/node (the wiring, whose
# every test starts a whole node: a run would take hours).
default_pkgs="./server/signing ./server/beamsauth ./server/webhook ./server/push ./server/httpapi ./server/hub ./server/ws
	./server/cluster ./server/cluster/redisconn ./server/netguard ./storage ./server/config ./server/upgrade ./server/internal/clientrate ./server/console/traffic
	./server/eventlog ./server/idempotency"
pkgs=${*:-${PKGS:-$default_pkgs}}
workers=${WORKERS:-2}
coefficient=${TIMEOUT_COEFFICIENT:-10}
out=${MUTATE_OUT:-bin/mutate}
equivalent=scripts/mutate-equivalent.md
mkdir -p "$out"
out=$(cd "$out" && pwd)

# Files left out per package (regular expressions on the path inside the
# package, subpackages included: gremlins walks the directory down): test
# helpers, code built only on other systems, and a subpackage that has a
# run of its own.
excludes() {
	case $1 in
	server/cluster) echo '^redisconn/' ;;
	server/eventlog) echo '^eventlogtest/' ;;
	server/idempotency) echo '^idempotencytest/' ;;
	server/push) echo '^pushtest/' ;;
	server/ws) echo '_other\.go$' ;;
	storage) echo '^testpg/' ;;
	esac
}

# gremlins mutates only code inside a block of Go's coverage profile, and the
# profile has no block for a switch case's expression, a select case, the
# rest of a line after a function literal (`if err := f(func() {...}); err
# != nil`) or a package-level declaration, so those would all count as not
# covered. gremlins runs `go` from
# PATH: this wrapper runs the real go and, after a coverage run, adds to the
# profile each gap between two blocks of which one ran. The heuristic can
# only err towards trying a mutant that no test reaches, which then lives
# and shows up below; it never hides one.
shim=$(mktemp -d)
trap 'rm -rf "$shim"' EXIT
real_go=$(command -v "${GO:-go}")
# With FIRST, a mutant's test run (a `go test` without -coverprofile) first
# runs only the tests FIRST names: most mutants fail one of them in seconds,
# where the whole suite takes minutes. A mutant that passes them still meets
# every test, so no verdict changes: a failure anywhere kills it either way.
first=$(printf %q "${FIRST:-}")
cat >"$shim/go" <<EOF
#!/usr/bin/env bash
if [ -n $first ] && [ "\$1" = test ] && [[ " \$* " != *" -coverprofile "* ]]; then
	"$real_go" test -run $first "\${@:2}" || exit \$?
fi
"$real_go" "\$@" || exit \$?
prev=
for arg in "\$@"; do
	if [ "\$prev" = -coverprofile ]; then "$root/scripts/mutate-fill-gaps.sh" "\$arg"; fi
	prev=\$arg
done
EOF
chmod +x "$shim/go"
# gremlins is run as a binary, not by `go tool`, which would put GOROOT/bin
# first in its PATH.
"$real_go" build -modfile=tools/go.mod -o "$shim/gremlins" github.com/go-gremlins/gremlins/cmd/gremlins

# The entries of the list's "Equivalent" part (not those under "Not killed").
equivalents=$(sed '/^## Not killed/,$d' "$equivalent" 2>/dev/null || true)

summary=$out/summary.txt
columns='%-18s %7s %6s %5s %7s %9s %9s %9s %6s\n'
printf "$columns" package mutants killed lived "not cov" "timed out" efficacy "excl. eq" time >"$summary.new"

for pkg in $pkgs; do
	pkg=${pkg#./}
	pkg=${pkg%/}
	name=${pkg//\//_}
	args=(unleash "$root/$pkg" --workers "$workers" --timeout-coefficient "$coefficient"
		--output "$out/$name.json" --output-statuses lt)
	regex=$(excludes "$pkg")
	if [ -n "$regex" ]; then args+=(--exclude-files "$regex"); fi
	if [ -n "${EXCLUDE:-}" ]; then args+=(--exclude-files "$EXCLUDE"); fi
	if [ -n "${DIFF:-}" ]; then args+=(--diff "$DIFF"); fi

	echo "== $pkg ($(date +%H:%M:%S))"
	start=$(date +%s)
	# From the package's directory, so that gremlins mutates only its files.
	# git's diff.relative makes a --diff's paths relative to the package,
	# as gremlins matches them (with the repository's, it skips every mutant).
	(cd "$pkg" && PATH="$shim:$PATH" GOFLAGS="${GOFLAGS:-} -count=1 -failfast" \
		GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=diff.relative GIT_CONFIG_VALUE_0=true \
		"$shim/gremlins" "${args[@]}") 2>&1 | tee "$out/$name.log"
	seconds=$(($(date +%s) - start))

	# Every mutant: "<status> <pkg>/<file>:<line>:<col> <type>".
	jq -r --arg pkg "$pkg" '.files[] | .file_name as $f | .mutations[]
		| "\(.status) \($pkg)/\($f):\(.line):\(.column) \(.type)"' "$out/$name.json" >"$out/$name.mutants"
	count() { grep -c "^$1 " "$out/$name.mutants" || true; }
	killed=$(count KILLED)
	lived=$(count LIVED)
	notcov=$(count 'NOT COVERED')
	timedout=$(count 'TIMED OUT')
	total=$(($(wc -l <"$out/$name.mutants") - $(count SKIPPED))) # skipped: outside DIFF's lines

	eq=0
	echo "-- lived in $pkg (= listed as equivalent in $equivalent):"
	while read -r _ where type; do
		if grep -qF "\`$where\` $type" <<<"$equivalents"; then
			eq=$((eq + 1))
			echo "   = $where $type"
		else
			echo "     $where $type"
		fi
	done < <(grep '^LIVED ' "$out/$name.mutants" || true)

	percent() { if [ "$2" -gt 0 ]; then awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f %%", 100 * a / b }'; else echo -; fi; }
	printf "$columns" "$pkg" "$total" "$killed" "$lived" "$notcov" "$timedout" \
		"$(percent "$killed" $((killed + lived)))" "$(percent "$killed" $((killed + lived - eq)))" "${seconds}s" >>"$summary.new"
done

mv "$summary.new" "$summary"
echo
echo "== summary ($(date -u +%Y-%m-%d), $workers workers, timeout coefficient $coefficient; in $out)"
cat "$summary"
