import CZstd
import Foundation
import Testing
import TributaryCompression

// MARK: - Frames made with libzstd

/// Compresses with libzstd's streaming API, so the test controls what the frame header says.
///
/// - Parameters:
///   - chunk: The bytes fed to the compressor, `repeats` times.
///   - pledgedSize: The content size announced up front (and written in the header), or `nil` for none.
///   - parameters: Extra compression parameters, such as `ZSTD_c_windowLog`.
private func streamCompress(
    _ chunk: [UInt8],
    repeats: Int = 1,
    pledgedSize: UInt64? = nil,
    parameters: [(ZSTD_cParameter, Int32)] = []
) throws -> [UInt8] {
    let context = try #require(ZSTD_createCCtx())
    defer { ZSTD_freeCCtx(context) }
    #expect(ZSTD_isError(ZSTD_CCtx_setParameter(context, ZSTD_c_compressionLevel, 1)) == 0)
    for (parameter, value) in parameters {
        let rc = ZSTD_CCtx_setParameter(context, parameter, value)
        #expect(ZSTD_isError(rc) == 0, "\(String(cString: ZSTD_getErrorName(rc)))")
    }
    if let pledgedSize { #expect(ZSTD_isError(ZSTD_CCtx_setPledgedSrcSize(context, pledgedSize)) == 0) }
    var output: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: ZSTD_CStreamOutSize())
    try chunk.withUnsafeBytes { source in
        for index in 0..<repeats {
            let last = index == repeats - 1
            var input = ZSTD_inBuffer(src: source.baseAddress, size: source.count, pos: 0)
            var finished = false
            while !finished {
                let (rc, produced) = buffer.withUnsafeMutableBytes { target in
                    var out = ZSTD_outBuffer(dst: target.baseAddress, size: target.count, pos: 0)
                    // ZSTD_e_continue on every chunk but the last, so the size is never learned early.
                    let rc = ZSTD_compressStream2(context, &out, &input, last ? ZSTD_e_end : ZSTD_e_continue)
                    return (rc, out.pos)
                }
                try #require(ZSTD_isError(rc) == 0, "\(String(cString: ZSTD_getErrorName(rc)))")
                output += buffer[0..<produced]
                finished = last ? rc == 0 : input.pos == input.size
            }
        }
    }
    return output
}

/// Where a frame's Frame_Content_Size field sits (RFC 8878, 3.1.1.1), and how long it is.
private func contentSizeField(_ frame: [UInt8]) -> (offset: Int, length: Int) {
    let descriptor = frame[4]
    let flag = Int(descriptor >> 6)
    let singleSegment = descriptor & 0x20 != 0
    var offset = 5
    if !singleSegment { offset += 1 }  // Window_Descriptor
    offset += [0, 1, 2, 4][Int(descriptor & 3)]  // Dictionary_ID
    let length = flag == 0 ? (singleSegment ? 1 : 0) : [1, 2, 4, 8][flag]
    return (offset, length)
}

/// The frame with its header rewritten to declare `size` bytes of content, in an 8-byte field.
private func declaring(_ size: UInt64, _ frame: [UInt8]) -> [UInt8] {
    let (offset, length) = contentSizeField(frame)
    let descriptor = frame[4] & 0x3F | 0xC0  // Frame_Content_Size_Flag 3: 8 bytes
    return Array(frame[0..<4]) + [descriptor] + Array(frame[5..<offset])
        + (0..<8).map { UInt8(truncatingIfNeeded: size >> (8 * UInt64($0))) } + Array(frame[(offset + length)...])
}

/// A frame written byte by byte (RFC 8878): magic, a descriptor with a 2-byte content size and no single-segment
/// flag, the given window descriptor byte, then one raw block holding `content`.
private func handMadeFrame(windowDescriptor: UInt8, content: [UInt8]) -> [UInt8] {
    precondition((256..<65_792).contains(content.count) && content.count < 128 << 10)
    let stored = content.count - 256
    let blockHeader = content.count << 3 | 1  // Last_Block, Block_Type 0 (raw), Block_Size
    return [0x28, 0xB5, 0x2F, 0xFD, 0x40, windowDescriptor, UInt8(stored & 0xFF), UInt8(stored >> 8)]
        + [UInt8(blockHeader & 0xFF), UInt8((blockHeader >> 8) & 0xFF), UInt8(blockHeader >> 16)] + content
}

/// Text-like bytes that compress well, `count` long.
private func sampleContent(_ count: Int, salt: Int = 0) -> [UInt8] {
    let words = ["changeset", "replica", "stamp", "merge", "list", "embedded", "\"_id\"", "{", "}", ":", "42", " "]
    var bytes: [UInt8] = []
    var state = UInt64(0x9E37_79B9_7F4A_7C15) &+ UInt64(salt)
    while bytes.count < count {
        state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        bytes += Array(words[Int(state >> 60) % words.count].utf8)
    }
    return Array(bytes.prefix(count))
}

/// The process's anonymous resident memory (RssAnon, not VmRSS, which counts file mappings), in bytes.
private func residentAnonymousBytes() -> Int? {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
    for line in status.split(separator: "\n") where line.hasPrefix("RssAnon:") {
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        if fields.count >= 2, let kilobytes = Int(fields[1]) { return kilobytes * 1024 }
    }
    return nil
}

private func compressionError(
    _ input: [UInt8],
    limit: Int = 16 << 20,
    codec: ZstdCodec = ZstdCodec(),
    sourceLocation: SourceLocation = #_sourceLocation
) -> CompressionError? {
    do {
        let output = try codec.decompress(input, maximumOutputBytes: limit)
        Issue.record("decompressed \(output.count) bytes; expected an error", sourceLocation: sourceLocation)
        return nil
    } catch {
        return error
    }
}

private let mebibyte = 1 << 20
private let limit = 16 << 20  // 16 MiB per changeset

// MARK: - Tests

@Suite("zstd codec") struct ZstdCodecTests {
    @Test("Round trips at several levels and sizes, reusing one context", arguments: [1, 3, 19] as [Int32])
    func roundTrips(level: Int32) throws {
        let codec = ZstdCodec(level: level)
        let context = ZstdContext()
        for input in [[], [0x42], sampleContent(1_000), sampleContent(200_000), [UInt8](repeating: 0, count: mebibyte)]
        {
            let packed = try codec.compress(input, context: context)
            #expect(try codec.decompress(packed, maximumOutputBytes: input.count, context: context) == input)
            #expect(try codec.decompress(packed, maximumOutputBytes: limit) == input)
            // The frame declares its size: one byte under it is refused before decoding.
            if !input.isEmpty {
                #expect(compressionError(packed, limit: input.count - 1, codec: codec)?.code == .tooLarge)
            }
        }
        #expect(try codec.compress(sampleContent(200_000)).count < 50_000)
    }

    @Test("Round trips with a raw-content dictionary, which makes small payloads smaller")
    func dictionaryRoundTrips() throws {
        let dictionary = sampleContent(16 << 10, salt: 1)
        let codec = ZstdCodec(level: 3, dictionary: dictionary)
        let context = ZstdContext()
        for salt in 2..<6 {
            let input = sampleContent(300, salt: salt)
            let packed = try codec.compress(input, context: context)
            #expect(try codec.decompress(packed, maximumOutputBytes: limit, context: context) == input)
            #expect(packed.count < (try ZstdCodec(level: 3).compress(input)).count)
        }
        // The same context serves a codec without a dictionary afterwards.
        let plain = ZstdCodec()
        let input = sampleContent(5_000, salt: 9)
        #expect(
            try plain.decompress(plain.compress(input, context: context), maximumOutputBytes: limit, context: context)
                == input
        )
        // A frame made with the dictionary does not decode to its content without it.
        let packed = try codec.compress(sampleContent(300, salt: 2))
        let withoutDictionary = Result { try plain.decompress(packed, maximumOutputBytes: limit) }
        if case .success(let bytes) = withoutDictionary { #expect(bytes != sampleContent(300, salt: 2)) }
    }

    // MARK: zstd bombs

    @Test("zstd bomb: a small frame declaring 256 MiB is refused before decoding")
    func declared256MiB() throws {
        let bomb = try streamCompress([UInt8](repeating: 0, count: 64 << 10), repeats: 4_096, pledgedSize: 256 << 20)
        #expect(bomb.count < 16 << 10, "the bomb is \(bomb.count) bytes")
        let error = compressionError(bomb)
        #expect(error?.code == .tooLarge)
        #expect(error?.message == "zstd frame declares 268435456 bytes of content, over the limit of 16777216 bytes")
    }

    @Test("zstd bomb: the same frame without a content size is refused")
    func withoutContentSize() throws {
        let bomb = try streamCompress(
            [UInt8](repeating: 0, count: 64 << 10),
            repeats: 4_096,
            parameters: [(ZSTD_c_contentSizeFlag, 0)]
        )
        #expect(ZSTD_getFrameContentSize(bomb, bomb.count) == ZSTD_CONTENTSIZE_UNKNOWN)
        let error = compressionError(bomb)
        #expect(error?.code == .unknownContentSize)
        #expect(error?.message == "zstd frame does not declare its content size; refusing to decode it unbounded")
        // Even a small, honest frame without a content size is refused: nothing bounds its output in advance.
        let small = try streamCompress(sampleContent(1_000), repeats: 2)
        #expect(ZSTD_getFrameContentSize(small, small.count) == ZSTD_CONTENTSIZE_UNKNOWN)
        #expect(compressionError(small)?.code == .unknownContentSize)
    }

    @Test("zstd bomb: a content size patched smaller or larger than the content is refused")
    func patchedContentSize() throws {
        let content = sampleContent(100_000)
        let frame = try ZstdCodec().compress(content)
        #expect(try ZstdCodec().decompress(declaring(100_000, frame), maximumOutputBytes: limit) == content)

        for declared: UInt64 in [99_999, 50_000, 0, 100_001, 200_000] {
            let error = compressionError(declaring(declared, frame))
            #expect(error?.code == .corrupted, "declared \(declared)")
            #expect(
                error?.message.hasPrefix("zstd frame declaring \(declared) bytes could not be decoded: ") == true,
                "\(String(describing: error))"
            )
        }
        // Patched larger than the limit: refused from the header alone.
        for declared: UInt64 in [UInt64(limit) + 1, 1 << 40, ZSTD_CONTENTSIZE_ERROR - 1] {
            let error = compressionError(declaring(declared, frame))
            #expect(error?.code == .tooLarge)
            #expect(
                error?.message == "zstd frame declares \(declared) bytes of content, over the limit of 16777216 bytes"
            )
        }
    }

    @Test("zstd bomb: two concatenated frames are refused")
    func concatenatedFrames() throws {
        let codec = ZstdCodec()
        let first = try codec.compress(sampleContent(1_000))
        let second = try codec.compress(sampleContent(2_000, salt: 3))
        let error = compressionError(first + second)
        #expect(error?.code == .trailingData)
        #expect(
            error?.message
                == "\(second.count) bytes follow the \(first.count)-byte zstd frame; expected exactly one frame"
        )
    }

    @Test("zstd bomb: trailing bytes after the frame are refused", arguments: [1, 7, 4_096])
    func trailingBytes(count: Int) throws {
        let frame = try ZstdCodec().compress(sampleContent(1_000))
        let error = compressionError(frame + [UInt8](repeating: 0xAB, count: count))
        #expect(error?.code == .trailingData)
        #expect(
            error?.message == "\(count) bytes follow the \(frame.count)-byte zstd frame; expected exactly one frame"
        )
    }

    @Test("zstd bomb: a skippable frame is refused, alone or before a real frame")
    func skippableFrame() throws {
        let payload = sampleContent(64)
        var skippable = [UInt8](repeating: 0, count: payload.count + 8)
        let written = skippable.withUnsafeMutableBytes { target in
            payload.withUnsafeBytes { source in
                ZSTD_writeSkippableFrame(target.baseAddress, target.count, source.baseAddress, source.count, 5)
            }
        }
        try #require(ZSTD_isError(written) == 0)
        #expect(skippable[0..<4] == [0x55, 0x2A, 0x4D, 0x18])
        let error = compressionError(skippable)
        #expect(error?.code == .skippableFrame)
        #expect(error?.message == "payload is a skippable zstd frame, which carries no content")
        #expect(compressionError(skippable + (try ZstdCodec().compress(payload)))?.code == .skippableFrame)
    }

    @Test("zstd bomb: window log 31 is refused, from libzstd and by hand")
    func windowLog31() throws {
        // libzstd writes a 2 GiB window when it cannot learn the size: streamed, with no pledged size.
        let content = sampleContent(1_000)
        let streamed = try streamCompress(Array(content[0..<500]), repeats: 2, parameters: [(ZSTD_c_windowLog, 31)])
        var header = ZSTD_frameHeader()
        #expect(ZSTD_getFrameHeader(&header, streamed, streamed.count) == 0)
        #expect(header.windowSize == 1 << 31)
        #expect(compressionError(streamed)?.code == .unknownContentSize)
        // With a content size patched into its header, only the window is wrong.
        let patched = declaring(1_000, streamed)
        // libzstd's one-shot decoder accepts it: the frame is valid, only its window breaks Tributary's rule.
        var output = [UInt8](repeating: 0, count: 1_000)
        let produced = output.withUnsafeMutableBytes {
            ZSTD_decompress($0.baseAddress, $0.count, patched, patched.count)
        }
        #expect(produced == 1_000)
        #expect(output == Array(content[0..<500]) + Array(content[0..<500]))
        #expect(ZSTD_getFrameContentSize(patched, patched.count) == 1_000)
        let error = compressionError(patched)
        #expect(error?.code == .windowTooLarge)
        #expect(
            error?.message == "zstd frame asks for a 2147483648-byte window, over the limit of 134217728 bytes"
        )

        // By hand (RFC 8878 3.1.1.1.2): Window_Descriptor exponent 21, mantissa 0 -> 2^(10 + 21) bytes.
        let handMade = handMadeFrame(windowDescriptor: 21 << 3, content: content)
        #expect(compressionError(handMade)?.message == error?.message)
        // The limit itself, 2^27, is accepted; 2^27 + 2^24 and 2^28 are not.
        #expect(
            try ZstdCodec().decompress(
                handMadeFrame(windowDescriptor: 17 << 3, content: content),
                maximumOutputBytes: limit
            ) == content
        )
        #expect(
            compressionError(handMadeFrame(windowDescriptor: 17 << 3 | 1, content: content))?.code == .windowTooLarge
        )
        #expect(compressionError(handMadeFrame(windowDescriptor: 18 << 3, content: content))?.code == .windowTooLarge)
    }

    @Test("zstd bomb: every vector is refused in under 10 ms and without growing resident memory by 64 MiB")
    func bombsAreCheap() throws {
        let zeros = [UInt8](repeating: 0, count: 64 << 10)
        let declared = try streamCompress(zeros, repeats: 4_096, pledgedSize: 256 << 20)
        let content = sampleContent(1_000)
        let frame = try ZstdCodec().compress(content)
        var skippable = [UInt8](repeating: 0, count: 72)
        _ = skippable.withUnsafeMutableBytes { target in
            content.withUnsafeBytes {
                ZSTD_writeSkippableFrame(target.baseAddress, target.count, $0.baseAddress, 64, 0)
            }
        }
        let vectors: [(String, [UInt8])] = [
            ("256 MiB declared", declared),
            ("no content size", try streamCompress(zeros, repeats: 4_096, parameters: [(ZSTD_c_contentSizeFlag, 0)])),
            ("content size smaller", declaring(999, frame)),
            ("content size larger", declaring(1 << 40, frame)),
            ("two frames", frame + frame),
            ("trailing bytes", frame + [0]),
            ("skippable frame", skippable),
            ("window log 31", handMadeFrame(windowDescriptor: 21 << 3, content: content)),
        ]
        let codec = ZstdCodec()
        let context = ZstdContext()
        let clock = ContinuousClock()
        _ = try? codec.decompress(frame, maximumOutputBytes: limit, context: context)  // warm the context up
        let before = residentAnonymousBytes()
        for (name, vector) in vectors {
            var fastest = Duration.seconds(1)
            for _ in 0..<5 {
                let elapsed = clock.measure {
                    #expect(throws: CompressionError.self, "\(name)") {
                        try codec.decompress(vector, maximumOutputBytes: limit, context: context)
                    }
                }
                fastest = min(fastest, elapsed)
            }
            #expect(fastest < .milliseconds(10), "\(name) took \(fastest)")
        }
        if let before, let after = residentAnonymousBytes() {
            // Other suites run in this process at the same time, so this is a loose bound (4 MiB failed once in a
            // clean CI run with a simulator beside it: 5.9 MB): a decoded bomb would add 256 MiB.
            #expect(after - before < 64 * mebibyte, "RssAnon grew by \(after - before) bytes")
        }
    }

    // MARK: Malformed input

    @Test("Empty input, garbage, and a truncated header")
    func malformed() throws {
        #expect(compressionError([])?.message == "compressed payload is empty")
        let garbage = compressionError(Array("not zstd at all".utf8))
        #expect(garbage?.code == .notZstd)
        #expect(garbage?.message == "payload is not a zstd frame (Unknown frame descriptor)")
        let frame = try ZstdCodec().compress(sampleContent(1_000))
        let truncated = compressionError(Array(frame[0..<5]))
        #expect(truncated?.code == .truncated)
        #expect(truncated?.message.hasPrefix("compressed payload is truncated: frame header needs ") == true)
        #expect(compressionError(frame, limit: -1)?.code == .tooLarge)
    }

    @Test("Truncation at every offset is an error, never a trap")
    func truncationAtEveryOffset() throws {
        let codec = ZstdCodec()
        let context = ZstdContext()
        let frame = try codec.compress(sampleContent(5_000))
        for length in 0..<frame.count {
            #expect(throws: CompressionError.self, "length \(length)") {
                try codec.decompress(Array(frame[0..<length]), maximumOutputBytes: limit, context: context)
            }
        }
    }

    @Test("Every flipped bit gives the content or an error, never a trap")
    func bitFlips() throws {
        let codec = ZstdCodec()
        let context = ZstdContext()
        let content = sampleContent(2_000)
        let frame = try codec.compress(content)
        var decoded = 0
        for bit in 0..<frame.count * 8 {
            var damaged = frame
            damaged[bit / 8] ^= 1 << UInt8(bit % 8)
            if let output = try? codec.decompress(damaged, maximumOutputBytes: limit, context: context) {
                decoded += 1
                #expect(output.count <= limit)
            }
        }
        // zstd frames carry no checksum here (the changeset has its own XXH64), so some flips decode to
        // other bytes; the point is that none of them traps.
        print("bitFlips: \(frame.count * 8) flips, \(decoded) decoded to something")
    }
}
