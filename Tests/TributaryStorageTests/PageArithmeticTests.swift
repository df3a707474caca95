import Testing

@testable import TributaryStorage

/// The data file's size from a meta page's last page number, which a damaged file can set to anything.
@Suite("Page arithmetic")
struct PageArithmeticTests {
    @Test("Bytes through a page: exact when it fits, Int.max when a damaged page number overflows it")
    func bytesThroughPage() {
        #expect(Environment.bytes(throughPage: 0, pageSize: UInt32(4096)) == 4096)
        #expect(Environment.bytes(throughPage: 9, pageSize: UInt32(4096)) == 40_960)
        #expect(Environment.bytes(throughPage: Int.max, pageSize: UInt32(4096)) == .max)
        #expect(Environment.bytes(throughPage: 1 << 52, pageSize: UInt32(4096)) == .max)
        #expect(Environment.bytes(throughPage: UInt64.max, pageSize: UInt32(4096)) == .max)
        #expect(Environment.bytes(throughPage: -1, pageSize: UInt32(4096)) == .max)
    }
}
