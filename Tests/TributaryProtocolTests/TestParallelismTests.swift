import Foundation
import Testing
import TributaryTestParallelism

/// The test process limits how many tests run at once, so that the sync tests' connections keep moving on a machine of
/// few cores (Tests/TributaryTestSupport/Parallelism/parallelism.c).
@Suite("The test process")
struct TestParallelismTests {
    @Test("Runs at most three tests per core at once, unless the environment names another number")
    func widthIsLimited() throws {
        let value = ProcessInfo.processInfo.environment["SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH"]
        let width = try #require(value.flatMap(Int.init), "no width in the environment: the constructor did not run")
        let set = tributary_test_parallelism_width_set()
        if set != 0 {
            #expect(width == set)
            #expect(width == max(4, 3 * ProcessInfo.processInfo.activeProcessorCount))
        }
    }
}
