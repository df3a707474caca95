public import Testing

// The tags of the tests that the quick set leaves out (docs/Testing.md). `swift test --filter` and `--skip` match test
// names (`Module.Suite/function`), not tags, so a suite with one of these tags has one of the words `Drill`, `Fuzz` or
// `Slow` in its type name (a single tagged test in another suite: in its function name), and
// `swift test --skip 'Drill|Fuzz|Slow'` runs the quick set. No other test name holds those words.
extension Tag {
    /// A reliability drill: kill -9 crashes, storage fault loops, a full disk, map growth, on-disk corruption, a
    /// million-changeset log, the convergence simulator's seeds. Bounded for CI; `TRIBUTARY_DEEP=1` runs them long.
    @Tag public static var drill: Self

    /// A fuzzer: random or mutated inputs, checked against a decoder's contract or a reference. `TRIBUTARY_SEED` picks
    /// the inputs.
    @Tag public static var fuzz: Self

    /// A suite that takes more than about ten seconds in a debug build on a 2-core machine.
    @Tag public static var slow: Self
}
