#!/usr/bin/env bash
# Coverage-guided fuzzing of the decoders of bytes that come from outside or from disk, with libFuzzer and
# AddressSanitizer (docs/Testing.md, "Fuzz targets").
#
#   Tools/fuzz/run.sh <target> [runs] [libFuzzer flags...]   build the target, then run it for `runs` inputs
#                                                             (default 200000; 0 runs until stopped)
#   Tools/fuzz/run.sh build [target...]                       build targets without running them
#   Tools/fuzz/run.sh list                                    the targets
#
# Targets: record, changeset, logentry, schema, query, message, rules. Each is Tools/fuzz/<target>.swift, compiled with
# the package's modules it needs (compiled here, not by SwiftPM: `swiftc -sanitize=fuzzer` must instrument them and
# link libFuzzer's main). The corpus grows in $TRIBUTARY_FUZZ_DIR/corpus/<target> (default .build/fuzz), seeded
# by the target; inputs that crash or make readers disagree are written to $TRIBUTARY_FUZZ_DIR/findings/<target>.
# Add them to the test suite's regression cases (for records, StoredRecordReaderTests.regressions).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
out=${TRIBUTARY_FUZZ_DIR:-$root/.build/fuzz}
targets=(record changeset logentry schema query message rules)

# The modules each target needs, in build order.
modules_for() {
    case "$1" in
    record) echo TributaryModel TributaryMerge ;;
    changeset | schema | rules) echo TributaryModel ;;
    logentry) echo TributaryModel TributaryStorage TributaryCompression TributaryLog ;;
    query) echo TributaryModel TributaryQuery ;;
    message) echo TributaryModel TributaryProtocol ;;
    *)
        echo "unknown target '$1' (targets: ${targets[*]})" >&2
        exit 2
        ;;
    esac
}

# Sources a target compiles besides its own file: the record target shares its checks with the test suite.
extra_sources_for() {
    echo "$root/Tools/fuzz/Support/Fuzzing.swift"
    case "$1" in
    record) echo "$root/Tests/TributaryMergeTests/RecordReaderAgreement.swift" ;;
    changeset | logentry) echo "$root/Tools/fuzz/Support/Changesets.swift" ;;
    esac
}

swift_flags=(
    -sanitize=fuzzer,address -parse-as-library -O -g -package-name Tributary
    -enable-upcoming-feature ExistentialAny -enable-upcoming-feature MemberImportVisibility
    -enable-upcoming-feature InternalImportsByDefault
    -I "$out/modules" -I "$root/Sources/CLMDB" -I "$root/Sources/CZstd"
)

# The package's modules a module imports (Package.swift's dependencies).
dependencies_of() {
    case "$1" in
    TributaryMerge | TributaryQuery | TributaryProtocol) echo TributaryModel ;;
    TributaryLog) echo TributaryModel TributaryStorage TributaryCompression ;;
    esac
}

# Compiles one of the package's modules into $out/modules (its interface) and $out/objects (one object file), unless
# it is newer than its sources and the modules it imports.
build_module() {
    local module=$1 object="$out/objects/$1.o" dependency
    mkdir -p "$out/modules" "$out/objects"
    if [[ -f $object ]] && [[ -z $(find "$root/Sources/$module" -name '*.swift' -newer "$object" | head -1) ]]; then
        local stale=""
        for dependency in $(dependencies_of "$module"); do
            [[ "$out/objects/$dependency.o" -nt $object ]] && stale=1
        done
        [[ -z $stale ]] && return
    fi
    echo "compiling $module" >&2
    # shellcheck disable=SC2046
    swiftc "${swift_flags[@]}" -module-name "$module" -wmo -c $(find "$root/Sources/$module" -name '*.swift' | sort) \
        -emit-module -emit-module-path "$out/modules/$module.swiftmodule" -o "$object"
}

build_target() {
    local target=$1 module objects=()
    for module in $(modules_for "$target"); do
        build_module "$module"
        objects+=("$out/objects/$module.o")
    done
    mkdir -p "$out/bin"
    echo "linking $target" >&2
    # shellcheck disable=SC2046
    # (gold warns about every sanitizer symbol it cannot export: noise.)
    swiftc "${swift_flags[@]}" -module-name "Fuzz_$target" "$root/Tools/fuzz/$target.swift" \
        $(extra_sources_for "$target") "${objects[@]}" -llmdb -lzstd -o "$out/bin/$target" \
        2> >(grep -v 'Cannot export local symbol' >&2)
}

command=${1:-}
case "$command" in
"" | -h | --help)
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
    ;;
list)
    printf '%s\n' "${targets[@]}"
    ;;
build)
    shift
    for target in "${@:-${targets[@]}}"; do build_target "$target"; done
    ;;
*)
    target=$command
    runs=${2:-200000}
    [[ $runs == 0 ]] && runs=-1
    shift $(($# < 2 ? $# : 2))
    build_target "$target"
    corpus="$out/corpus/$target" findings="$out/findings/$target"
    mkdir -p "$corpus" "$findings"
    # The target writes its seeds into an empty corpus (LLVMFuzzerInitialize reads this variable).
    export TRIBUTARY_FUZZ_SEEDS="$corpus"
    # libFuzzer, not Swift's backtracer, handles a crash: it keeps the input that caused it.
    export SWIFT_BACKTRACE=enable=no
    exec "$out/bin/$target" -runs="$runs" -artifact_prefix="$findings/" -print_final_stats=1 -timeout=20 \
        -rss_limit_mb=4096 "$@" "$corpus"
    ;;
esac
