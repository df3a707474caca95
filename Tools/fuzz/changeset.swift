// Changesets, as the log stores them and peers send them: decoding gives a changeset or an error, never a trap; what
// decodes re-encodes to bytes that decode to the same changeset, and its header reads alike on its own.
import Foundation
import TributaryModel

@_cdecl("LLVMFuzzerInitialize")
public func initialize(_ argc: OpaquePointer?, _ argv: OpaquePointer?) -> CInt {
    writeSeeds(sampleChangesets().map(ChangesetCodec.encode))
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    checkChangeset(withChecksum(input(data, size)))
    return 0
}
