import CZstd

/// Compresses and decompresses payloads with zstd, with an optional shared dictionary.
///
/// Decompression never trusts its input: it reads the frame header first and refuses a payload that is not
/// exactly one frame, does not declare its content size, declares more than `maximumOutputBytes`, or asks
/// for a window larger than ``maximumWindowBytes``. Only then does it allocate the output, of exactly the
/// declared size, and it checks that the frame filled it.
///
/// A codec is a value and is `Sendable`; the zstd contexts it needs are kept in a ``ZstdContext``, which a hot
/// loop can reuse (one per thread).
///
/// ```swift
/// let codec = ZstdCodec(level: 3)
/// let packed = try codec.compress(bytes)
/// let unpacked = try codec.decompress(packed, maximumOutputBytes: 16 << 20)
/// ```
public struct ZstdCodec: Sendable {
    /// The largest window a frame may ask for: 128 MiB, zstd's own default decoding limit.
    public static let maximumWindowBytes: UInt64 = 1 << 27

    /// Whether `bytes` start as a zstd frame does (its magic number), so that a reader can tell a frame from data
    /// whose format starts otherwise.
    public static func startsFrame(_ bytes: [UInt8]) -> Bool {
        bytes.count >= 4 && bytes[0] == 0x28 && bytes[1] == 0xB5 && bytes[2] == 0x2F && bytes[3] == 0xFD
    }

    /// The compression level (1 fastest ... 19 smallest). Default: 3.
    public var level: Int32
    /// A dictionary trained on typical payloads, shared by the compressing and decompressing sides, or `nil`.
    public var dictionary: [UInt8]?

    public init(level: Int32 = 3, dictionary: [UInt8]? = nil) {
        self.level = level
        self.dictionary = dictionary
    }

    /// Compresses `input` into one zstd frame that declares its content size.
    public func compress(_ input: [UInt8], context: ZstdContext? = nil) throws(CompressionError) -> [UInt8] {
        let context = context ?? ZstdContext()
        let result = input.withUnsafeBytes { source in
            Result { () throws(CompressionError) in try context.compress(source, level: level, dictionary: dictionary) }
        }
        return try result.get()
    }

    /// Decompresses one zstd frame, refusing it if it would produce more than `maximumOutputBytes`.
    ///
    /// - Throws: ``CompressionError`` naming the rule the payload broke.
    /// - Complexity: O(`input.count` + declared size); nothing is allocated for a refused payload.
    public func decompress(
        _ input: [UInt8], maximumOutputBytes: Int, context: ZstdContext? = nil
    ) throws(CompressionError) -> [UInt8] {
        let result = input.withUnsafeBytes { source in
            Result { () throws(CompressionError) in
                try decompress(source, maximumOutputBytes: maximumOutputBytes, context: context)
            }
        }
        return try result.get()
    }

    /// Decompresses one zstd frame from raw bytes; see ``decompress(_:maximumOutputBytes:context:)-([UInt8],_,_)``.
    public func decompress(
        _ source: UnsafeRawBufferPointer, maximumOutputBytes: Int, context: ZstdContext? = nil
    ) throws(CompressionError) -> [UInt8] {
        let declared = try Self.checkedContentSize(of: source, maximumOutputBytes: maximumOutputBytes)
        let context = context ?? ZstdContext()
        return try context.decompress(source, contentSize: declared, dictionary: dictionary)
    }

    /// Reads and checks a frame's header; returns its declared content size.
    static func checkedContentSize(
        of source: UnsafeRawBufferPointer, maximumOutputBytes: Int
    ) throws(CompressionError) -> Int {
        guard let base = source.baseAddress, source.count > 0 else {
            throw CompressionError(.truncated, "compressed payload is empty")
        }
        var header = ZSTD_frameHeader()
        let rc = ZSTD_getFrameHeader(&header, base, source.count)
        if ZSTD_isError(rc) != 0 {
            throw CompressionError(.notZstd, "payload is not a zstd frame (\(errorName(rc)))")
        }
        if rc > 0 {
            throw CompressionError(
                .truncated, "compressed payload is truncated: frame header needs \(rc) bytes, \(source.count) present")
        }
        if header.frameType == ZSTD_skippableFrame {
            throw CompressionError(.skippableFrame, "payload is a skippable zstd frame, which carries no content")
        }
        let contentSize = header.frameContentSize
        if contentSize == ZSTD_CONTENTSIZE_UNKNOWN {
            throw CompressionError(
                .unknownContentSize, "zstd frame does not declare its content size; refusing to decode it unbounded")
        }
        if contentSize == ZSTD_CONTENTSIZE_ERROR {
            throw CompressionError(.corrupted, "zstd frame header is invalid")
        }
        guard contentSize <= UInt64(max(maximumOutputBytes, 0)), let size = Int(exactly: contentSize) else {
            throw CompressionError(
                .tooLarge,
                "zstd frame declares \(contentSize) bytes of content, over the limit of \(maximumOutputBytes) bytes")
        }
        if header.windowSize > maximumWindowBytes {
            throw CompressionError(
                .windowTooLarge,
                "zstd frame asks for a \(header.windowSize)-byte window, over the limit of \(maximumWindowBytes) bytes")
        }
        let frameLength = ZSTD_findFrameCompressedSize(base, source.count)
        if ZSTD_isError(frameLength) != 0 {
            throw CompressionError(.truncated, "zstd frame is truncated or damaged (\(errorName(frameLength)))")
        }
        if frameLength != source.count {
            throw CompressionError(
                .trailingData,
                "\(source.count - frameLength) bytes follow the \(frameLength)-byte zstd frame; expected exactly one frame"
            )
        }
        return size
    }
}

func errorName(_ code: Int) -> String {
    String(cString: ZSTD_getErrorName(code))
}

/// Reusable zstd compression and decompression contexts.
///
/// Not `Sendable`: a zstd context must be used by one thread at a time. Keep one per thread (or per task) in
/// hot loops; creating one costs a few allocations.
public final class ZstdContext {
    private var compressionContext: OpaquePointer?
    private var decompressionContext: OpaquePointer?

    public init() {}

    deinit {
        if let compressionContext { ZSTD_freeCCtx(compressionContext) }
        if let decompressionContext { ZSTD_freeDCtx(decompressionContext) }
    }

    func compress(
        _ source: UnsafeRawBufferPointer, level: Int32, dictionary: [UInt8]?
    ) throws(CompressionError) -> [UInt8] {
        if compressionContext == nil { compressionContext = ZSTD_createCCtx() }
        guard let context = compressionContext else {
            throw CompressionError(.compressionFailed, "zstd could not allocate a compression context")
        }
        let bound = ZSTD_compressBound(source.count)
        var output = [UInt8](repeating: 0, count: bound)
        let written = output.withUnsafeMutableBytes { target -> Int in
            let dictionaryBytes = dictionary ?? []
            return dictionaryBytes.withUnsafeBytes { dictionaryBuffer in
                ZSTD_compress_usingDict(
                    context, target.baseAddress, target.count, source.baseAddress, source.count,
                    dictionaryBuffer.baseAddress, dictionaryBuffer.count, level)
            }
        }
        if ZSTD_isError(written) != 0 {
            throw CompressionError(.compressionFailed, "zstd compression failed: \(errorName(written))")
        }
        output.removeLast(bound - written)
        return output
    }

    func decompress(
        _ source: UnsafeRawBufferPointer, contentSize: Int, dictionary: [UInt8]?
    ) throws(CompressionError) -> [UInt8] {
        if decompressionContext == nil { decompressionContext = ZSTD_createDCtx() }
        guard let context = decompressionContext else {
            throw CompressionError(.corrupted, "zstd could not allocate a decompression context")
        }
        // Left uninitialized: zeroing it first would touch every page of the declared size, so a frame that declares
        // hundreds of MiB and holds a few bytes would cost that much memory before zstd finds it short.
        var produced = 0
        let output = [UInt8](unsafeUninitializedCapacity: contentSize) { target, initialized in
            let dictionaryBytes = dictionary ?? []
            produced = dictionaryBytes.withUnsafeBytes { dictionaryBuffer in
                ZSTD_decompress_usingDict(
                    context, target.baseAddress, target.count, source.baseAddress, source.count,
                    dictionaryBuffer.baseAddress, dictionaryBuffer.count)
            }
            initialized = ZSTD_isError(produced) == 0 && produced == contentSize ? contentSize : 0
        }
        if ZSTD_isError(produced) != 0 {
            // Name the declared size: a frame whose header lies about it fails here (zstd checks the size itself).
            throw CompressionError(
                .corrupted, "zstd frame declaring \(contentSize) bytes could not be decoded: \(errorName(produced))")
        }
        if produced != contentSize {
            throw CompressionError(
                .sizeMismatch, "zstd frame declared \(contentSize) bytes of content but produced \(produced)")
        }
        return output
    }
}

@available(*, unavailable, message: "a zstd context must be used by one thread at a time")
extension ZstdContext: Sendable {}
