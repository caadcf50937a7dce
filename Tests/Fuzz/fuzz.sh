#!/usr/bin/env bash
# Builds and runs the libFuzzer targets listed in Tests/Fuzz/targets (`make fuzz`; docs/testing.md).
#
# The package's library modules are built once with libFuzzer coverage and AddressSanitizer
# (SwiftPM, scratch path .build/fuzz/pm, with -enable-testing so harnesses may `@testable import`);
# each target is its harness Tests/Fuzz/NAME.swift plus Tests/Fuzz/Support/*.swift linked against them.
#
#   FUZZ_SECONDS=60       seconds per target
#   FUZZ_TARGETS="A B"    run only these targets (names as in Tests/Fuzz/targets)
#   FUZZ_SEEDS_ONLY=1     start from the committed seeds only and keep nothing (what CI does);
#                         otherwise new inputs accumulate in .build/fuzz/corpus/NAME
#   FUZZ_ARGS="..."       extra libFuzzer arguments, e.g. "-jobs=2 -workers=2" or "-use_value_profile=1"
#
# Crashes are written to .build/fuzz/artifacts/NAME-*; the script prints how to reproduce one.
# Exits non-zero when a target fails to build or finds a crash, after running the others.
set -uo pipefail
cd "$(dirname "$0")/../.."
SWIFT=${SWIFT:-swift}
SWIFTC=${SWIFTC:-$(dirname "$(command -v "$SWIFT")")/swiftc}
seconds=${FUZZ_SECONDS:-60}
root=.build/fuzz
fuzz_dir=Tests/Fuzz
mkdir -p "$root/bin" "$root/corpus" "$root/artifacts" "$root/logs"
# Let a Swift trap reach libFuzzer's crash handler (which saves the input) instead of Swift's backtracer.
export SWIFT_BACKTRACE=enable=no

# Library targets (instrumented and linked in) and system-library targets (module maps, link flags),
# from the package description so new modules are picked up without editing this script.
description=$("$SWIFT" package describe) || exit 1
read -r -d '' modules < <(awk '
    /^Targets:/ { targets = 1 }
    targets && /^    Name:/ { name = $2 }
    targets && /^    Type:/ { type = $2 }
    targets && /^    Path:/ { if (type == "library" && $2 !~ /^Tests\//) print name }' <<<"$description")
read -r -d '' system_paths < <(awk '
    /^Targets:/ { targets = 1 }
    targets && /^    Module type:/ { kind = $3 }
    targets && /^    Path:/ { if (kind == "SystemLibraryTarget") print $2 }' <<<"$description")

flags=(-swift-version 6 -enable-upcoming-feature ExistentialAny -parse-as-library -O -sanitize=fuzzer,address -use-ld=lld
    -I "$root/pm/release/Modules")
for path in $system_paths; do
    flags+=(-I "$path")
    for library in $(sed -n 's/.*link "\([^"]*\)".*/\1/p' "$path/module.modulemap"); do flags+=(-l"$library"); done
done
for package in $(sed -n 's/.*pkgConfig: "\([^"]*\)".*/\1/p' Package.swift); do
    for flag in $(pkg-config --cflags-only-I "$package" 2>/dev/null); do flags+=(-Xcc "$flag"); done
    for flag in $(pkg-config --libs-only-L "$package" 2>/dev/null); do flags+=("$flag"); done
done

echo "fuzz: building the library modules with -sanitize=fuzzer,address ($(echo $modules))"
for module in $modules; do
    "$SWIFT" build --scratch-path "$root/pm" -c release -Xswiftc -sanitize=fuzzer,address -Xswiftc -enable-testing \
        --target "$module" >"$root/logs/build-$module.log" 2>&1 || {
        tail -30 "$root/logs/build-$module.log"
        echo "fuzz: FAILED to build module $module (log: $root/logs/build-$module.log)"
        exit 1
    }
done
# The objects of each module's current sources (a removed source leaves a stale object behind).
objects=()
for module in $modules; do
    while read -r source; do objects+=("$root/pm/release/$module.build/$(basename "$source").o"); done <"$root/pm/release/$module.build/sources"
done

failures=0
summary=()
while read -r name max_len; do
    [[ -z "$name" || "$name" == \#* ]] && continue
    if [[ -n "${FUZZ_TARGETS:-}" && " $FUZZ_TARGETS " != *" $name "* ]]; then continue; fi
    binary="$root/bin/$name"
    if ! "$SWIFTC" "${flags[@]}" -module-name "${name//-/_}" "$fuzz_dir/$name.swift" "$fuzz_dir"/Support/*.swift "${objects[@]}" \
        -o "$binary" >"$root/logs/link-$name.log" 2>&1; then
        grep -v "warning:" "$root/logs/link-$name.log" | tail -30
        summary+=("$(printf '%-28s BUILD FAILED (%s)' "$name" "$root/logs/link-$name.log")")
        failures=$((failures + 1))
        continue
    fi
    seeds="$fuzz_dir/Corpus/$name"
    if [[ "${FUZZ_SEEDS_ONLY:-0}" == 1 ]]; then
        corpus=$(mktemp -d)
    else
        corpus="$root/corpus/$name"
        mkdir -p "$corpus"
    fi
    log="$root/logs/run-$name.log"
    echo "fuzz: $name for ${seconds}s (max_len $max_len)"
    # shellcheck disable=SC2086  # FUZZ_ARGS is a list of words
    "$binary" -max_total_time="$seconds" -max_len="$max_len" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$root/artifacts/$name-" ${FUZZ_ARGS:-} "$corpus" "$seeds" >"$log" 2>&1
    status=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    edges=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    units=$(find "$corpus" "$seeds" -type f 2>/dev/null | wc -l)
    if [[ $status -ne 0 ]]; then
        grep -E "ERROR|SUMMARY|Fatal error|Test unit written|^    #[0-9]+ 0x" "$log" | head -30
        artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
        summary+=("$(printf '%-28s FAILED (exit %d): log %s; reproduce: SWIFT_BACKTRACE=enable=no %s %s' "$name" "$status" "$log" "$binary" "${artifact:-}")")
        failures=$((failures + 1))
    else
        summary+=("$(printf '%-28s ok: %12s runs  %6s edges  %6s corpus files' "$name" "${runs:-?}" "${edges:-?}" "$units")")
    fi
    [[ "${FUZZ_SEEDS_ONLY:-0}" == 1 ]] && rm -rf "$corpus"
done <"$fuzz_dir/targets"

echo
echo "fuzz: ${seconds}s per target"
printf '  %s\n' "${summary[@]}"
if [[ $failures -ne 0 ]]; then
    echo "fuzz: $failures target(s) failed"
    exit 1
fi
