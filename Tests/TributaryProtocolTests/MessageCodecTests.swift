import Testing
import TributaryModel
import TributaryTestSupport

@testable import TributaryProtocol

@Suite("Protocol message codec")
struct MessageCodecTests {
    @Test("Every kind of message decodes to what was encoded")
    func roundTrip() throws {
        let vector = VersionVector([(ReplicaID(rawValue: 7), 3), (ReplicaID(rawValue: 1 << 60), 12)])
        let messages: [Message] = [
            .hello(
                Hello(
                    replica: ReplicaID(rawValue: 42), role: .app, schemaVersion: 3, credentials: [1, 2, 3],
                    name: "Notes on iPad", vector: vector, pending: [Dot(origin: ReplicaID(rawValue: 9), sequence: 4)],
                    anchors: [
                        HistoryAnchor(dot: Dot(origin: ReplicaID(rawValue: 7), sequence: 3), fingerprint: 1 << 63)
                    ], firstSchemaVersion: 2)),
            .welcome(Welcome(version: 1, replica: ReplicaID(rawValue: 5), vector: vector, yours: 17)),
            .changesets(ChangesetBatch(number: 3, changesets: [[0xAA], [], [1, 2, 3]], progress: vector, more: true)),
            .ack(
                Acknowledgement(
                    batch: 3, checkpoint: vector,
                    rejected: [.init(dot: Dot(origin: ReplicaID(rawValue: 7), sequence: 2), reason: "schema conflict")])
            ),
            .mark(request: 1), .markReply(request: 1),
            .error(SyncError(.unavailable, .retry, "shutting down", retryAfterSeconds: 5)),
            .ping(nonce: 99), .pong(nonce: 99),
        ]
        for message in messages {
            #expect(try MessageCodec.decode(MessageCodec.encode(message)) == message)
        }
    }

    // MARK: The encoding as docs/Protocol.md writes it

    @Test(
        "The encoding is the spec's: fields in the listed order, LEB128 uints, little-endian ids",
        arguments: Samples.oneOfEachKind + Samples.edgeValues + Samples.empties)
    func encodingFollowsTheSpec(message: Message) {
        #expect(MessageCodec.encode(message) == Wire.encoding(message).bytes)
    }

    @Test("A base's held vector may have more entries than other vectors (one per app); a hello's may not")
    func heldVectorBound() throws {
        let large = VersionVector((1...100_000).map { (ReplicaID(rawValue: UInt64($0)), UInt64($0 % 7 + 1)) })
        let part = BasePart(
            part: 1, last: true, vector: Samples.vector, held: large, latest: 1, schema: Schema(types: []), total: 0,
            objects: [], adoptions: [])
        #expect(try MessageCodec.decode(MessageCodec.encode(.base(part))) == .base(part))
        let hello = Hello(replica: ReplicaID(rawValue: 1), role: .app, vector: large)
        #expect(throws: SyncError.self) { try MessageCodec.decode(MessageCodec.encode(.hello(hello))) }
    }

    @Test("A few encodings written out byte by byte")
    func literalEncodings() throws {
        #expect(MessageCodec.encode(.ping(nonce: 300)) == [8, 0xAC, 0x02])
        #expect(MessageCodec.encode(.mark(request: 0)) == [5, 0])
        #expect(
            MessageCodec.encode(.error(SyncError(.timeout, .retry, "hi", retryAfterSeconds: 1)))
                == [7, 9, 1, 1, 2, 0x68, 0x69])
        let batch = ChangesetBatch(
            number: 1, changesets: [[0xAB]], progress: VersionVector([(ReplicaID(rawValue: 0x0102_0304_0506_0708), 5)]),
            more: true)
        let bytes: [UInt8] = [3, 1, 1, 1, 0xAB, 1, 8, 7, 6, 5, 4, 3, 2, 1, 5, 1]
        #expect(MessageCodec.encode(.changesets(batch)) == bytes)
        #expect(try MessageCodec.decode(bytes) == .changesets(batch))
    }

    // MARK: Round trips at the edges

    @Test("Numbers at 2^64 - 1 and 0 survive a round trip", arguments: Samples.edgeValues)
    func edgeValuesRoundTrip(message: Message) throws {
        #expect(try MessageCodec.decode(MessageCodec.encode(message)) == message)
    }

    @Test(
        "Empty vectors, dot lists, changeset lists, bytes and strings survive a round trip", arguments: Samples.empties)
    func emptiesRoundTrip(message: Message) throws {
        #expect(try MessageCodec.decode(MessageCodec.encode(message)) == message)
    }

    @Test("Names, credentials and texts of exactly the standard limits, in ASCII and in multibyte UTF-8, round trip")
    func maximalStringsRoundTrip() throws {
        let names = [
            String(repeating: "n", count: 256), String(repeating: "\u{1F4D3}", count: 64),
            String(repeating: "\u{E9}", count: 128), "Zo\u{EB}'s notes \u{1F4D3}",
        ]
        for name in names {
            let hello = Hello(
                replica: ReplicaID(rawValue: 1), role: .peer, credentials: Array(repeating: 0xC5, count: 16 << 10),
                name: name, vector: Samples.vector)
            #expect(try MessageCodec.decode(MessageCodec.encode(.hello(hello))) == .hello(hello))
        }
        let text = String(repeating: "\u{20AC}", count: 1365) + "x"  // 4,096 bytes
        #expect(text.utf8.count == 4 << 10)
        let error = Message.error(SyncError(.storage, .retry, text, retryAfterSeconds: 60))
        #expect(try MessageCodec.decode(MessageCodec.encode(error)) == error)
        let ack = Message.ack(
            Acknowledgement(
                batch: 9, checkpoint: Samples.vector,
                rejected: (1...1000).map { .init(dot: Dot(origin: ReplicaID(rawValue: 3), sequence: $0), reason: text) }
            ))
        #expect(try MessageCodec.decode(MessageCodec.encode(ack)) == ack)
    }

    @Test("The standard limits are the spec's table")
    func standardLimitsAreTheSpecs() {
        let limits = MessageLimits.standard
        #expect(limits.maximumMessageBytes == 16 << 20)
        #expect(limits.maximumChangesetsPerBatch == 10_000)
        #expect(limits.maximumVectorEntries == 65_536)
        #expect(limits.maximumDots == 65_536)
        #expect(limits.maximumRejections == 1_000)
        #expect(limits.maximumCredentialsBytes == 16 << 10)
        #expect(limits.maximumNameBytes == 256)
        #expect(limits.maximumTextBytes == 4 << 10)
        #expect(SyncProtocol.maximumMessageBytes == 16 << 20)
    }

    @Test("Counts exactly at the standard limits decode, one more is refused")
    func standardCountLimits() throws {
        let entries = (1...65_536).map { (ReplicaID(rawValue: UInt64($0)), UInt64($0)) }
        let dots = (1...65_536).map { Dot(origin: ReplicaID(rawValue: 5), sequence: UInt64($0)) }
        let hello = Hello(
            replica: ReplicaID(rawValue: 1), role: .app, vector: VersionVector(entries), pending: dots)
        #expect(try MessageCodec.decode(MessageCodec.encode(.hello(hello))) == .hello(hello))
        var tooMany = hello
        tooMany.vector.advance(ReplicaID(rawValue: 1 << 40), to: 1)
        expectViolation(MessageCodec.encode(.hello(tooMany)), naming: "vector entries", "65536")
        tooMany = hello
        tooMany.pending.append(Dot(origin: ReplicaID(rawValue: 5), sequence: 70_000))
        expectViolation(MessageCodec.encode(.hello(tooMany)), naming: "dots", "65536")

        let batch = ChangesetBatch(
            number: 1, changesets: Array(repeating: [], count: 10_000), progress: VersionVector(), more: false)
        #expect(try MessageCodec.decode(MessageCodec.encode(.changesets(batch))) == .changesets(batch))
        var moreChangesets = batch
        moreChangesets.changesets.append([])
        expectViolation(MessageCodec.encode(.changesets(moreChangesets)), naming: "changesets", "10000")

        let rejections = (1...1_001).map {
            Acknowledgement.Rejection(dot: Dot(origin: ReplicaID(rawValue: 2), sequence: $0), reason: "")
        }
        let ack = Acknowledgement(batch: 1, checkpoint: VersionVector(), rejected: Array(rejections.dropLast()))
        #expect(try MessageCodec.decode(MessageCodec.encode(.ack(ack))) == .ack(ack))
        expectViolation(
            MessageCodec.encode(.ack(Acknowledgement(batch: 1, checkpoint: VersionVector(), rejected: rejections))),
            naming: "rejections", "1000")

        var longName = Samples.hello
        longName.name = String(repeating: "\u{E9}", count: 128) + "x"
        expectViolation(MessageCodec.encode(.hello(longName)), naming: "name", "256")
        var longCredentials = Samples.hello
        longCredentials.credentials = Array(repeating: 1, count: (16 << 10) + 1)
        expectViolation(MessageCodec.encode(.hello(longCredentials)), naming: "credentials", "16384")
        let longMessage = SyncError(.storage, .retry, String(repeating: "m", count: (4 << 10) + 1))
        expectViolation(MessageCodec.encode(.error(longMessage)), naming: "message", "4096")
    }

    @Test("A message of exactly 16 MiB decodes; one byte more is refused before it is read")
    func standardMessageSizeLimit() throws {
        let size = 16 << 20
        // kind, number 1, count 1, a 4-byte length, the changeset, an empty progress vector, more.
        let changeset = [UInt8](repeating: 0x5A, count: size - 9)
        let batch = ChangesetBatch(number: 1, changesets: [changeset], progress: VersionVector(), more: false)
        let bytes = MessageCodec.encode(.changesets(batch))
        #expect(bytes.count == size)
        #expect(try MessageCodec.decode(bytes) == .changesets(batch))
        var over = bytes
        over.replaceSubrange(2..<3, with: [0x81, 0x00])  // the count, padded: still well formed, one byte longer
        #expect(
            try MessageCodec.decode(over, limits: smallLimits { $0.maximumMessageBytes = size + 1 })
                == .changesets(batch))
        expectViolation(over, naming: "\(size + 1) bytes", "over the limit of \(size)")
    }

    // MARK: Each rule of the encoding, broken

    @Test("An empty message is a violation")
    func emptyMessage() {
        expectViolation([], naming: "empty")
    }

    @Test("An unknown kind byte is a violation that names it", arguments: [0, 14, 15, 0x7F, 0x80, 0xFF] as [UInt8])
    func unknownKind(kind: UInt8) {
        expectViolation([kind], naming: "unknown message kind \(kind)")
        expectViolation([kind, 1, 2, 3], naming: "unknown message kind \(kind)")
    }

    @Test(
        "Bytes after the last field are a violation",
        arguments: Samples.oneOfEachKind + Samples.edgeValues + Samples.empties)
    func trailingBytes(message: Message) {
        let bytes = MessageCodec.encode(message)
        expectViolation(bytes + [0], naming: "1 bytes after the last field")
        expectViolation(bytes + bytes, naming: "\(bytes.count) bytes after the last field")
    }

    @Test(
        "Every prefix of every kind's encoding is a violation, never a trap",
        arguments: Samples.oneOfEachKind + Samples.edgeValues + Samples.empties)
    func everyPrefixIsTruncated(message: Message) {
        let bytes = MessageCodec.encode(message)
        for length in 0..<bytes.count {
            let prefix = Array(bytes[..<length])
            expectViolation(prefix, naming: length == 0 ? "empty" : "truncated")
        }
        #expect(decodingError(bytes) == nil)
    }

    @Test("A uint of up to 10 bytes decodes, padded or not, up to 2^64 - 1")
    func longestUint() throws {
        #expect(try MessageCodec.decode([8] + Array(repeating: 0xFF, count: 9) + [0x01]) == .ping(nonce: .max))
        var padded = Wire(kind: 8)
        padded.uint(5, paddedTo: 10)
        #expect(try MessageCodec.decode(padded.bytes) == .ping(nonce: 5))
        var paddedLength = Wire(kind: 7)
        paddedLength.uint(10)
        paddedLength.u8(3)
        paddedLength.uint(0)
        paddedLength.uint(2, paddedTo: 10)
        paddedLength.bytes += Array("no".utf8)
        #expect(try MessageCodec.decode(paddedLength.bytes) == .error(SyncError(.resetRequired, .fatal, "no")))
    }

    @Test("A uint longer than 10 bytes is a violation")
    func uintLongerThanTenBytes() {
        var eleven = Wire(kind: 8)
        eleven.uint(5, paddedTo: 11)
        expectViolation(eleven.bytes, naming: "varint")
        expectViolation([9] + Array(repeating: 0x80, count: 10) + [0], naming: "varint")
        expectViolation([5] + Array(repeating: 0xFF, count: 20), naming: "varint")
        // In a length: the credentials' length.
        var length = Wire(kind: 1)
        length.uint(1)
        length.uint(1)
        length.id(1)
        length.u8(1)
        length.uint(0)
        length.uint(0, paddedTo: 11)
        expectViolation(length.bytes, naming: "varint")
    }

    @Test("A uint over 2^64 - 1 is a violation", arguments: [0x02, 0x03, 0x7F] as [UInt8])
    func uintOverflow(lastByte: UInt8) {
        expectViolation([8] + Array(repeating: 0xFF, count: 9) + [lastByte], naming: "varint")
        expectViolation([6] + Array(repeating: 0x80, count: 9) + [lastByte], naming: "varint")
        // As a count: a vector's entry count.
        var wire = Wire(kind: 4)
        wire.uint(1)
        wire.bytes += Array(repeating: 0xFF, count: 9) + [lastByte]
        expectViolation(wire.bytes, naming: "varint")
    }

    @Test(
        "Vector entries that do not rise strictly are a violation, wherever the vector is",
        arguments: VectorSite.allCases)
    func vectorNotRising(site: VectorSite) throws {
        #expect(decodingError(site.bytes(vector: [(1, 1), (2, 1), (.max, 1)])) == nil)
        expectViolation(site.bytes(vector: [(2, 1), (2, 1)]), naming: "rising")
        expectViolation(site.bytes(vector: [(2, 1), (2, 5)]), naming: "rising")
        expectViolation(site.bytes(vector: [(3, 1), (2, 1)]), naming: "rising")
        expectViolation(site.bytes(vector: [(1, 1), (.max, 1), (5, 1)]), naming: "rising")
    }

    @Test("A vector entry with sequence 0 is a violation, wherever the vector is", arguments: VectorSite.allCases)
    func vectorSequenceZero(site: VectorSite) {
        expectViolation(site.bytes(vector: [(1, 0)]), naming: "sequence 0")
        expectViolation(site.bytes(vector: [(1, 4), (2, 0)]), naming: "sequence 0")
    }

    @Test("A dot with sequence 0 is a violation, in a list of dots and in a rejection", arguments: DotSite.allCases)
    func dotSequenceZero(site: DotSite) {
        #expect(decodingError(site.bytes(dots: [(7, 1), (7, .max)])) == nil)
        expectViolation(site.bytes(dots: [(7, 0)]), naming: "sequence 0")
        expectViolation(site.bytes(dots: [(7, 1), (9, 0)]), naming: "sequence 0")
    }

    @Test("A bool other than 0 or 1 is a violation", arguments: [2, 0x80, 0xFF] as [UInt8])
    func boolByte(value: UInt8) throws {
        #expect(
            try MessageCodec.decode(Build.changesets(more: 1))
                == .changesets(.init(number: 1, changesets: [[9]], progress: .init(), more: true)))
        expectViolation(Build.changesets(more: value), naming: "more is \(value)")
    }

    @Test("A role other than 1 (app) or 2 (peer) is a violation", arguments: [0, 3, 0xFF] as [UInt8])
    func unknownRole(role: UInt8) throws {
        guard case .hello(let hello) = try MessageCodec.decode(Build.hello(role: 2)) else {
            Issue.record("not a hello")
            return
        }
        #expect(hello.role == .peer)
        expectViolation(Build.hello(role: role), naming: "unknown role \(role)")
    }

    @Test("An error action other than 1, 2 or 3 is a violation", arguments: [0, 4, 0xFF] as [UInt8])
    func unknownAction(action: UInt8) throws {
        #expect(try MessageCodec.decode(Build.error(action: 2)) == .error(SyncError(.unavailable, .reset, "")))
        expectViolation(Build.error(action: action), naming: "unknown action \(action)")
    }

    @Test("A hello whose lowest version is above its highest is a violation")
    func emptyVersionRange() throws {
        #expect(decodingError(Build.hello(versions: (3, 3))) == nil)
        expectViolation(Build.hello(versions: (4, 3)), naming: "version range")
        expectViolation(Build.hello(versions: (.max, 0)), naming: "version range")
    }

    @Test(
        "Invalid UTF-8 in a name, an error message or a rejection reason is a violation",
        arguments: TextSite.allCases,
        [[0xFF], [0xC3], [0x61, 0xED, 0xA0, 0x80], [0xC0, 0x80], [0xF4, 0x90, 0x80, 0x80]] as [[UInt8]])
    func invalidUTF8(site: TextSite, text: [UInt8]) throws {
        #expect(decodingError(site.bytes(text: Array("ok \u{1F4D3}".utf8))) == nil)
        expectViolation(site.bytes(text: text), naming: site.rawValue, "UTF-8")
    }

    @Test("Each limit: exactly at it decodes, one over is a violation that names it", arguments: LimitCase.allCases)
    func limits(limit: LimitCase) throws {
        let limits = limit.limits(3)
        let atLimit = limit.message(3)
        #expect(try MessageCodec.decode(MessageCodec.encode(atLimit), limits: limits) == atLimit)
        let over = limit.message(4)
        let bytes = MessageCodec.encode(over)
        #expect(try MessageCodec.decode(bytes) == over)  // the standard limits take it: only the small one refuses
        expectViolation(bytes, limits: limits, naming: limit.word, "over the limit of 3")
    }

    @Test("A message over maximumMessageBytes is a violation; exactly at it decodes", arguments: Samples.oneOfEachKind)
    func messageSizeLimit(message: Message) throws {
        let bytes = MessageCodec.encode(message)
        #expect(try MessageCodec.decode(bytes, limits: smallLimits { $0.maximumMessageBytes = bytes.count }) == message)
        expectViolation(
            bytes, limits: smallLimits { $0.maximumMessageBytes = bytes.count - 1 },
            naming: "\(bytes.count) bytes", "over the limit of \(bytes.count - 1)")
    }

    @Test("A changeset longer than maximumMessageBytes is a violation, whatever follows")
    func changesetLongerThanTheMessageLimit() {
        var wire = Wire(kind: 3)
        wire.uint(1)
        wire.uint(1)
        wire.uint(UInt64(SyncProtocol.maximumMessageBytes) + 1)
        expectViolation(wire.bytes + [0, 0], naming: "changeset", "over the limit")
    }

    @Test("Counts and lengths larger than the bytes left are refused before anything is read")
    func countsBeyondTheBytesLeft() {
        // Under the standard limits, each of these claims up to megabytes; the message holds a few bytes.
        var vector = Wire(kind: 2)
        vector.uint(1)
        vector.id(1)
        vector.uint(65_536)
        expectViolation(vector.bytes + [1, 2, 3], naming: "truncated")
        var dots = Wire(kind: 2)
        dots.uint(1)
        dots.id(1)
        dots.uint(0)
        dots.uint(65_536)
        expectViolation(dots.bytes + [1, 2, 3], naming: "truncated")
        var changesets = Wire(kind: 3)
        changesets.uint(1)
        changesets.uint(10_000)
        expectViolation(changesets.bytes + [0, 0, 0], naming: "truncated")
        var changeset = Wire(kind: 3)
        changeset.uint(1)
        changeset.uint(1)
        changeset.uint(16 << 20 - 16)
        expectViolation(changeset.bytes + [0, 0, 0], naming: "truncated")
        var rejections = Wire(kind: 4)
        rejections.uint(1)
        rejections.uint(0)
        rejections.uint(1_000)
        expectViolation(rejections.bytes + Array(repeating: 1, count: 20), naming: "truncated")
        expectViolation(Build.hello(credentialsLength: 16 << 10), naming: "truncated")
        for huge: UInt64 in [1 << 31, 1 << 32, 1 << 63, .max] {
            var wire = Wire(kind: 3)
            wire.uint(1)
            wire.uint(huge)
            expectViolation(wire.bytes + [0, 0, 0], naming: "over the limit")
            expectViolation(Build.hello(credentialsLength: huge), naming: "over the limit")
        }
    }

    @Test("An unknown error code decodes and keeps its number")
    func unknownErrorCode() throws {
        for code: UInt64 in [0, 11, 4242, .max] {
            let bytes = Build.error(code: code, action: 1, retryAfter: 30, message: Array("later".utf8))
            let message = try MessageCodec.decode(bytes)
            guard case .error(let error) = message else {
                Issue.record("\(message) is not an error")
                continue
            }
            #expect(error.code.rawValue == code)
            #expect(error.code == SyncError.Code(rawValue: code))
            #expect(error.action == .retry)
            #expect(error.retryAfterSeconds == 30)
            #expect(error.message == "later")
            #expect(MessageCodec.encode(message) == bytes)
        }
        guard case .error(let error) = try MessageCodec.decode(Build.error(code: 4242)) else { return }
        #expect(error.code.description == "error 4242")
        #expect(error.code != .protocolViolation)
    }

    @Test("The known error codes are the spec's numbers")
    func errorCodeNumbers() {
        let codes: [SyncError.Code] = [
            .protocolViolation, .unsupportedVersion, .unauthorized, .badChangeset, .roleRefused, .superseded,
            .unavailable, .storage, .timeout, .resetRequired,
        ]
        #expect(codes.map(\.rawValue) == Array(1...10))
        #expect(SyncError.Action.retry.rawValue == 1)
        #expect(SyncError.Action.reset.rawValue == 2)
        #expect(SyncError.Action.fatal.rawValue == 3)
        #expect(SyncRole.app.rawValue == 1)
        #expect(SyncRole.peer.rawValue == 2)
    }
}

// MARK: - Hand-built messages

/// Messages written field by field with ``Wire``, so that one field can be made wrong.
private enum Build {
    static func hello(
        versions: (UInt64, UInt64) = (1, 1), role: UInt8 = 1, name: [UInt8] = [],
        vector: [(replica: UInt64, sequence: UInt64)] = [], pending: [(origin: UInt64, sequence: UInt64)] = []
    ) -> [UInt8] {
        var wire = Wire(kind: 1)
        wire.uint(versions.0)
        wire.uint(versions.1)
        wire.id(42)
        wire.u8(role)
        wire.uint(0)
        wire.data([7, 7])
        wire.data(name)
        wire.vector(vector)
        wire.dots(pending)
        wire.uint(1024)
        wire.bool(false)
        wire.uint(0)  // anchors
        wire.uint(0)  // first schema version
        return wire.bytes
    }

    /// A hello whose credentials claim `length` bytes, with three present.
    static func hello(credentialsLength length: UInt64) -> [UInt8] {
        var wire = Wire(kind: 1)
        wire.uint(1)
        wire.uint(1)
        wire.id(42)
        wire.u8(1)
        wire.uint(0)
        wire.uint(length)
        return wire.bytes + [1, 2, 3]
    }

    static func welcome(
        vector: [(replica: UInt64, sequence: UInt64)] = [], pending: [(origin: UInt64, sequence: UInt64)] = []
    ) -> [UInt8] {
        var wire = Wire(kind: 2)
        wire.uint(1)
        wire.id(5)
        wire.vector(vector)
        wire.dots(pending)
        for value: UInt64 in [3, 1 << 20, 16 << 20, 30] { wire.uint(value) }
        return wire.bytes
    }

    static func changesets(progress: [(replica: UInt64, sequence: UInt64)] = [], more: UInt8 = 0) -> [UInt8] {
        var wire = Wire(kind: 3)
        wire.uint(1)
        wire.uint(1)
        wire.data([9])
        wire.vector(progress)
        wire.u8(more)
        return wire.bytes
    }

    static func ack(
        checkpoint: [(replica: UInt64, sequence: UInt64)] = [],
        rejections: [(origin: UInt64, sequence: UInt64, reason: [UInt8])] = []
    ) -> [UInt8] {
        var wire = Wire(kind: 4)
        wire.uint(2)
        wire.vector(checkpoint)
        wire.uint(UInt64(rejections.count))
        for rejection in rejections {
            wire.dot(origin: rejection.origin, sequence: rejection.sequence)
            wire.data(rejection.reason)
        }
        return wire.bytes
    }

    static func error(code: UInt64 = 7, action: UInt8 = 1, retryAfter: UInt64 = 0, message: [UInt8] = []) -> [UInt8] {
        var wire = Wire(kind: 7)
        wire.uint(code)
        wire.u8(action)
        wire.uint(retryAfter)
        wire.data(message)
        return wire.bytes
    }
}

/// The four places a version vector is read.
enum VectorSite: String, CaseIterable, Sendable {
    case helloVector, welcomeVector, changesetsProgress, ackCheckpoint

    fileprivate func bytes(vector: [(replica: UInt64, sequence: UInt64)]) -> [UInt8] {
        switch self {
        case .helloVector: Build.hello(vector: vector)
        case .welcomeVector: Build.welcome(vector: vector)
        case .changesetsProgress: Build.changesets(progress: vector)
        case .ackCheckpoint: Build.ack(checkpoint: vector)
        }
    }
}

/// The three places a dot is read.
enum DotSite: String, CaseIterable, Sendable {
    case helloPending, welcomePending, rejection

    fileprivate func bytes(dots: [(origin: UInt64, sequence: UInt64)]) -> [UInt8] {
        switch self {
        case .helloPending: Build.hello(pending: dots)
        case .welcomePending: Build.welcome(pending: dots)
        case .rejection: Build.ack(rejections: dots.map { ($0.origin, $0.sequence, Array("conflict".utf8)) })
        }
    }
}

/// The three strings; the raw value is the word the error names.
enum TextSite: String, CaseIterable, Sendable {
    case name, message, reason

    fileprivate func bytes(text: [UInt8]) -> [UInt8] {
        switch self {
        case .name: Build.hello(name: text)
        case .message: Build.error(message: text)
        case .reason: Build.ack(rejections: [(3, 1, text)])
        }
    }
}

/// Each limit of ``MessageLimits`` but the message size, with a message holding `count` of what it bounds.
enum LimitCase: String, CaseIterable, Sendable {
    case changesetsPerBatch, helloVectorEntries, welcomeVectorEntries, progressVectorEntries, checkpointVectorEntries
    case helloPendingDots, welcomePendingDots, rejections, credentialsBytes, nameBytes, errorMessageBytes
    case rejectionReasonBytes

    /// The standard limits with this one set to `value`.
    func limits(_ value: Int) -> MessageLimits {
        smallLimits { limits in
            switch self {
            case .changesetsPerBatch: limits.maximumChangesetsPerBatch = value
            case .helloVectorEntries, .welcomeVectorEntries, .progressVectorEntries, .checkpointVectorEntries:
                limits.maximumVectorEntries = value
            case .helloPendingDots, .welcomePendingDots: limits.maximumDots = value
            case .rejections: limits.maximumRejections = value
            case .credentialsBytes: limits.maximumCredentialsBytes = value
            case .nameBytes: limits.maximumNameBytes = value
            case .errorMessageBytes, .rejectionReasonBytes: limits.maximumTextBytes = value
            }
        }
    }

    /// What the error names.
    var word: String {
        switch self {
        case .changesetsPerBatch: "changesets"
        case .helloVectorEntries, .welcomeVectorEntries, .progressVectorEntries, .checkpointVectorEntries:
            "vector entries"
        case .helloPendingDots, .welcomePendingDots: "dots"
        case .rejections: "rejections"
        case .credentialsBytes: "credentials"
        case .nameBytes: "name"
        case .errorMessageBytes: "message"
        case .rejectionReasonBytes: "reason"
        }
    }

    func message(_ count: Int) -> Message {
        let vector = VersionVector((1...count).map { (ReplicaID(rawValue: UInt64($0) << 20), UInt64($0)) })
        let dots = (1...count).map { Dot(origin: ReplicaID(rawValue: 77), sequence: UInt64($0)) }
        let text = String(repeating: "\u{E9}", count: count / 2) + String(repeating: "t", count: count % 2)
        let bytes = [UInt8](repeating: 0xC7, count: count)
        switch self {
        case .changesetsPerBatch:
            return .changesets(
                ChangesetBatch(
                    number: 4, changesets: (0..<count).map { [UInt8(truncatingIfNeeded: $0), 1] },
                    progress: Samples.vector,
                    more: true))
        case .helloVectorEntries:
            return .hello(Hello(replica: ReplicaID(rawValue: 1), role: .app, vector: vector))
        case .welcomeVectorEntries:
            return .welcome(Welcome(version: 1, replica: ReplicaID(rawValue: 2), vector: vector))
        case .progressVectorEntries:
            return .changesets(ChangesetBatch(number: 1, changesets: [[1]], progress: vector, more: false))
        case .checkpointVectorEntries:
            return .ack(Acknowledgement(batch: 1, checkpoint: vector))
        case .helloPendingDots:
            return .hello(Hello(replica: ReplicaID(rawValue: 1), role: .app, vector: Samples.vector, pending: dots))
        case .welcomePendingDots:
            return .welcome(Welcome(version: 1, replica: ReplicaID(rawValue: 2), vector: Samples.vector, pending: dots))
        case .rejections:
            return .ack(
                Acknowledgement(
                    batch: 1, checkpoint: Samples.vector, rejected: dots.map { .init(dot: $0, reason: "no") }))
        case .credentialsBytes:
            return .hello(Hello(replica: ReplicaID(rawValue: 1), role: .peer, credentials: bytes, vector: vector))
        case .nameBytes:
            return .hello(Hello(replica: ReplicaID(rawValue: 1), role: .peer, name: text, vector: Samples.vector))
        case .errorMessageBytes:
            return .error(SyncError(.badChangeset, .fatal, text))
        case .rejectionReasonBytes:
            return .ack(
                Acknowledgement(
                    batch: 1, checkpoint: Samples.vector, rejected: [.init(dot: dots[0], reason: text)]))
        }
    }
}
